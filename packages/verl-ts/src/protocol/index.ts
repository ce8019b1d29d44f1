export {
  DataProto,
  DataProtoError,
  type DataProtoWire,
  isDataProtoWire,
  type MetaInfo,
  type NonTensorDict,
  type TensorDict,
} from "./data-proto.js";
export {
  type BatchTensor,
  batchTensor,
  concatRows,
  gatherRows,
  isTypedArray,
  rowSize,
  shapeSize,
  sliceRows,
  TensorShapeError,
  type TypedArray,
  tensorsEqual,
} from "./tensor.js";
