export { evalCommand } from "../cli/eval.js";
export {
  type EvalFigures,
  EvalInputError,
  type EvalOptions,
  type EvalResult,
  type EvalSample,
  evalFigures,
  evaluate,
  formatEvalTable,
  summarizeEval,
} from "./eval.js";
export { type TrajectorySample, trajectoryFromTir } from "./trajectory.js";
