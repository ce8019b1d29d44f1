/**
 * Keeping data-parallel replicas of one model identical over an actors' collective group: reduce the
 * gradients each replica computed on its own rows (`allReduceGradients`), or copy one replica's
 * weights to all (`broadcastParameters`). Both lay the tensors end to end in the model's parameter
 * order and make one collective call, so every replica must call them at the same point of its
 * program with the same model (the rule of every collective: same calls, same order, same sizes).
 */
import * as tf from "@tensorflow/tfjs";
import { collective } from "@torl-ts/actors";
import { gradientsToArrays } from "../models/logprobs.js";
import type { Qwen2Model } from "../models/qwen2.js";
import { FlatLayout } from "./flat-params.js";

/** `sum` adds the replicas' gradients; `mean` divides that sum by the number of replicas. */
export type GradientReduceOp = "sum" | "mean";

export interface AllReduceGradientsOptions {
  /** The collective group's name (from `createCollectiveGroup(handles, { name })`). */
  group: string;
  /** Default "mean" (each replica's loss is a mean over its own rows: the mean is the full batch's gradient when replicas hold equal shares). */
  op?: GradientReduceOp;
}

/** A gradient named a parameter the model does not have. */
export class GradientSyncError extends Error {
  override name = "GradientSyncError";
}

/** The model's parameters that have a gradient, in the model's order (the same on every replica). */
function layoutOf(model: Qwen2Model, grads: Map<string, tf.Tensor>): FlatLayout {
  const known = new Set(model.specs.map((s) => s.name));
  for (const name of grads.keys())
    if (!known.has(name))
      throw new GradientSyncError(`gradient for "${name}", which is not a parameter of the model`);
  return new FlatLayout(
    model.specs
      .filter((s) => grads.has(s.name))
      .map((s) => ({ name: s.name, size: grads.get(s.name)!.size })),
  );
}

/**
 * Reduces gradients (by parameter name, as `forwardBackward` returns them) across the replicas of
 * `group`: one all-reduce of the flattened gradients. The given tensors are disposed; the result
 * holds new tensors of the same shapes, identical on every replica bit for bit, ready for
 * `applyGradients`. `norm` is the L2 norm of the reduced gradient (for metrics and clipping).
 */
export async function allReduceGradients(
  model: Qwen2Model,
  grads: Map<string, tf.Tensor>,
  options: AllReduceGradientsOptions,
): Promise<{ grads: Map<string, tf.Tensor>; norm: number }> {
  const layout = layoutOf(model, grads);
  const shapes = new Map([...grads].map(([name, g]) => [name, g.shape]));
  const host = await gradientsToArrays(grads);
  const flat = layout.flatten(host);
  await collective.allReduce(flat, options.op ?? "mean", options.group);
  let squares = 0;
  for (const v of flat) squares += v * v;
  const reduced = new Map<string, tf.Tensor>();
  for (const [name, values] of layout.unflatten(flat))
    reduced.set(name, tf.tensor(values, shapes.get(name)!));
  return { grads: reduced, norm: Math.sqrt(squares) };
}

/**
 * Overwrites every replica's weights with rank `root`'s (one broadcast of the flattened
 * parameters), so replicas start identical even from different random initialisations.
 */
export async function broadcastParameters(
  model: Qwen2Model,
  options: { group: string; root?: number },
): Promise<void> {
  const params = await model.getParameters();
  const layout = new FlatLayout(model.specs.map((s) => ({ name: s.name, size: params.get(s.name)!.length })));
  const flat = layout.flatten(params);
  await collective.broadcast(flat, options.root ?? 0, options.group);
  model.setParameters(layout.unflatten(flat));
}
