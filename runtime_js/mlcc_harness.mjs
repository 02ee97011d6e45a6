// harness.mjs: runs a model compiled for the wasm target on raw files, in node. The same
// contract as the C test harness (runtime_c/harness/mlcc_harness.c), through the JavaScript
// wrapper model.mjs next to this file:
//
//     node harness.mjs WEIGHTS IN_0 ... IN_{n-1} OUT_0 ... OUT_{m-1}
//     node harness.mjs --dims D_0,D_1,... WEIGHTS IN_0 ... OUT_0 ...
//     node harness.mjs --info
//
// Each IN_i holds input i in model order as raw little-endian elements (exactly its size);
// each OUT_i is written the same way. WEIGHTS is weights.bin, or "-" for the weights embedded
// in model.wasm (--embed-weights). Exit status: 0 success; 1 wrong usage or a file that cannot
// be read or written (or has the wrong size); 2 the model returned an error status, printed
// on stderr as "harness: init failed: <mlcc_status_string> (status N)" or "harness: run
// failed: ...". Outputs whose size depends on the data: as the C harness, a line
// "output_shape I D0,D1,..." on stdout and only the valid elements in OUT_i.
import { readFileSync, writeFileSync } from "node:fs";
import { arraySize, createModel, modelInfo, typedArrays } from "./model.mjs";

const EXIT_USAGE = 1;
const EXIT_STATUS = 2;

function fail(message, code) {
  process.stderr.write(`harness: ${message}\n`);
  process.exit(code);
}

// Bytes of a tensor, in the wrapper's terms (packed types: their packed bytes).
function size(t) {
  return arraySize(t) * typedArrays[t.dtype].BYTES_PER_ELEMENT;
}

let args = process.argv.slice(2);
const ni = modelInfo.inputs.length;
const no = modelInfo.outputs.length;
if (args.length === 1 && args[0] === "--info") {
  console.log(`model ${modelInfo.name}, arena ${modelInfo.arena_size} bytes (align ` +
    `${modelInfo.arena_align}), weights ${modelInfo.weights_size} bytes` +
    (modelInfo.embedded_weights ? " (embedded)" : ""));
  modelInfo.inputs.forEach((t, i) => console.log(`input ${i} ${t.name} ${t.dtype} ` +
    `[${t.shape.join(",")}] ${size(t)} bytes`));
  modelInfo.outputs.forEach((t, i) => console.log(`output ${i} ${t.name} ${t.dtype} ` +
    `[${t.shape.join(",")}] ${size(t)} bytes`));
  process.exit(0);
}
let dims = null;      // --dims: the sizes of a range model's dynamic dimensions
if (args.length >= 2 && args[0] === "--dims") {
  dims = args[1].split(",").map(Number);
  if (!modelInfo.dims || dims.length !== modelInfo.dims.length ||
      !dims.every(Number.isInteger)) {
    fail(`--dims needs ${(modelInfo.dims || []).length} comma-separated sizes, not ` +
      `'${args[1]}'`, EXIT_USAGE);
  }
  args = args.slice(2);
}
if (args.length !== 1 + ni + no) {
  fail(`usage: node harness.mjs WEIGHTS IN... OUT...  (${ni} input file${ni === 1 ? "" : "s"}` +
    `, then ${no} output file${no === 1 ? "" : "s"}, in model order; WEIGHTS - for embedded ` +
    `weights)\n       node harness.mjs --info                (lists them)`, EXIT_USAGE);
}

function read(path, bytes) {
  let data;
  try {
    data = readFileSync(path);
  } catch (err) {
    fail(`cannot open ${path}`, EXIT_USAGE);
  }
  if (bytes !== undefined && data.length !== bytes) {
    fail(`${path} must hold exactly ${bytes} bytes`, EXIT_USAGE);
  }
  return data;
}

const weights = args[0] === "-" ? undefined : read(args[0]);

function modelFailed(err) {
  if (err.status) {
    const stage = err.message.startsWith("mlcc: init") ? "init" : "run";
    fail(`${stage} failed: ${err.statusText} (status ${err.status})`, EXIT_STATUS);
  }
  fail(err.message, EXIT_USAGE);
}

let model, shapes = null;
try {
  model = await createModel(weights === undefined ? {} : { weights });
  if (dims) shapes = model.shapes(dims);
} catch (err) {
  modelFailed(err);
}
// Bytes of input or output i at the sizes of --dims (without it, at its shape)
function sizeAt(t, shape) {
  return shape ? arraySize({ ...t, shape }) * typedArrays[t.dtype].BYTES_PER_ELEMENT : size(t);
}

const feeds = {};
modelInfo.inputs.forEach((t, i) => {
  const data = read(args[1 + i], sizeAt(t, shapes && shapes.inputs[i]));
  // A copy into a fresh, aligned buffer (node's Buffer may share an unaligned pool).
  const bytes = new Uint8Array(data.length);
  bytes.set(data);
  feeds[t.name] = new typedArrays[t.dtype](bytes.buffer);
});

let outputs;
let actual = {};
try {
  outputs = model.run(feeds, dims || undefined);
  actual = model.outputShapes;
} catch (err) {
  modelFailed(err);
}
modelInfo.outputs.forEach((t, i) => {
  if (t.dynamic_axis !== undefined) {
    console.log(`output_shape ${i} ${actual[t.name].join(",")}`);
  }
});
modelInfo.outputs.forEach((t, i) => {
  const a = outputs[t.name];
  try {
    writeFileSync(args[1 + ni + i], new Uint8Array(a.buffer, a.byteOffset, a.byteLength));
  } catch (err) {
    fail(`cannot write ${args[1 + ni + i]}`, EXIT_USAGE);
  }
});
