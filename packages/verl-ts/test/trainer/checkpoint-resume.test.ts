/** Which checkpoint a trainer resumes from (checkpointToResume, shared by the PPO and SFT trainers). */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import test from "ava";
import { CheckpointManager, checkpointToResume, type TrainerState } from "../../src/trainer/checkpoint.js";

const state = (step: number): TrainerState => ({
  globalStep: step,
  loader: { epoch: 0, position: 0, seed: 0, size: 1 },
  rng: 1,
  summary: {},
  wallSeconds: step,
});

test("auto takes the latest complete checkpoint, resume_path the one named, disable none", (t) => {
  const root = mkdtempSync(join(tmpdir(), "torl-resume-"));
  t.teardown(() => rmSync(root, { recursive: true, force: true }));
  const ckpt = new CheckpointManager(root);
  const auto = { resume_mode: "auto", resume_from_path: null } as const;
  t.is(checkpointToResume(ckpt, auto), undefined, "nothing saved yet: a fresh start");
  for (const step of [2, 4]) {
    ckpt.begin(step);
    ckpt.commit(step, state(step), null);
  }
  // an interrupted save is not a checkpoint
  mkdirSync(`${ckpt.stepDir(6)}.tmp`, { recursive: true });
  t.like(checkpointToResume(ckpt, auto), { dir: ckpt.stepDir(4), state: { globalStep: 4 } });
  t.like(checkpointToResume(ckpt, { resume_mode: "resume_path", resume_from_path: ckpt.stepDir(2) }), {
    dir: ckpt.stepDir(2),
    state: { globalStep: 2 },
  });
  t.is(checkpointToResume(ckpt, { resume_mode: "disable", resume_from_path: ckpt.stepDir(2) }), undefined);
  t.throws(() => checkpointToResume(ckpt, { resume_mode: "resume_path", resume_from_path: null }), {
    message: /trainer\.resume_from_path must be set/,
  });
  const broken = join(root, "broken");
  mkdirSync(broken);
  writeFileSync(join(broken, "trainer_state.json"), "{");
  t.throws(() => checkpointToResume(ckpt, { resume_mode: "resume_path", resume_from_path: broken }), {
    message: /broken\/trainer_state\.json: cannot read the trainer state/,
  });
});
