export {
  type EvalFigures,
  EvalInputError,
  type EvalOptions,
  type EvalResult,
  type EvalSample,
  evalCommand,
  evalFigures,
  evaluate,
  formatEvalTable,
  summarizeEval,
} from "./eval.js";
export { type TrajectorySample, trajectoryFromTir } from "./trajectory.js";
