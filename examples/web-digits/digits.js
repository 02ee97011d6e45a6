// The web-digits page: mouse (or touch) strokes -> an 8x8 image like scikit-learn's digits
// -> the digits CNN compiled by mlcc for wasm (model/model.mjs) -> digit and probabilities.
import { createModel } from "./model/model.mjs";

const pad = document.getElementById("pad");
const ink = pad.getContext("2d");
const preview = document.getElementById("preview");
const digitEl = document.getElementById("digit");
const statusEl = document.getElementById("status");
const barsEl = document.getElementById("bars");
const PEN_WIDTH = 18;            // on the 280x280 pad
const BITMAP = 32;               // the digits data set: 32x32 bitmaps counted in 4x4 blocks
const BITMAP_PEN = 3.6;          // pen width in the 32x32 bitmap (the data's strokes)

let strokes = [];                // [[x, y], ...] per stroke, in pad coordinates
let model = null;

const bars = [];
for (let d = 0; d < 10; d++) {
  const label = document.createElement("span");
  label.textContent = d;
  const bar = document.createElement("div");
  bar.className = "bar";
  bar.appendChild(document.createElement("div"));
  const value = document.createElement("span");
  value.textContent = "";
  barsEl.append(label, bar, value);
  bars.push({ bar, value });
}

function redraw() {
  ink.fillStyle = "#fff";
  ink.fillRect(0, 0, pad.width, pad.height);
  ink.strokeStyle = "#111";
  ink.lineWidth = PEN_WIDTH;
  ink.lineCap = ink.lineJoin = "round";
  for (const s of strokes) {
    ink.beginPath();
    ink.moveTo(s[0][0], s[0][1]);
    for (const [x, y] of s.slice(1)) ink.lineTo(x, y);
    if (s.length === 1) ink.lineTo(s[0][0] + 0.1, s[0][1]);
    ink.stroke();
  }
}

// The strokes fitted into a 32x32 bitmap (the bounding box scaled to fill it, aspect kept,
// centered, as the data set's digits are), then on-pixels counted per 4x4 block: 0..16.
export function toDigitsInput(strokeList) {
  const points = strokeList.flat();
  const input = new Float32Array(64);
  if (points.length === 0) return input;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs), y0 = Math.min(...ys), y1 = Math.max(...ys);
  const room = BITMAP - BITMAP_PEN - 1;
  const scale = room / Math.max(x1 - x0, y1 - y0, 1);
  const ox = (BITMAP - (x1 - x0) * scale) / 2, oy = (BITMAP - (y1 - y0) * scale) / 2;
  const bitmap = new OffscreenCanvas(BITMAP, BITMAP);
  const g = bitmap.getContext("2d", { willReadFrequently: true });
  g.strokeStyle = "#000";
  g.lineWidth = BITMAP_PEN;
  g.lineCap = g.lineJoin = "round";
  for (const s of strokeList) {
    g.beginPath();
    const map = ([x, y]) => [ox + (x - x0) * scale, oy + (y - y0) * scale];
    g.moveTo(...map(s[0]));
    for (const p of s.slice(1)) g.lineTo(...map(p));
    if (s.length === 1) g.lineTo(map(s[0])[0] + 0.1, map(s[0])[1]);
    g.stroke();
  }
  const alpha = g.getImageData(0, 0, BITMAP, BITMAP).data;
  for (let y = 0; y < BITMAP; y++) {
    for (let x = 0; x < BITMAP; x++) {
      if (alpha[(y * BITMAP + x) * 4 + 3] >= 128) input[(y >> 2) * 8 + (x >> 2)] += 1;
    }
  }
  return input.map((c) => c / 16);
}

function softmax(logits) {
  const m = Math.max(...logits);
  const e = Array.from(logits, (v) => Math.exp(v - m));
  const sum = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / sum);
}

function showPreview(input) {
  const g = preview.getContext("2d");
  const img = g.createImageData(8, 8);
  input.forEach((v, i) => {
    const level = 255 - Math.round(v * 255);
    img.data.set([level, level, level, 255], i * 4);
  });
  g.putImageData(img, 0, 0);
}

function predict() {
  const input = toDigitsInput(strokes);
  showPreview(input);
  if (!model || strokes.length === 0) {
    digitEl.textContent = "?";
    bars.forEach(({ bar, value }) => {
      bar.firstChild.style.width = "0";
      bar.classList.remove("top");
      value.textContent = "";
    });
    window.mlccDigits.prediction = null;
    return;
  }
  const t0 = performance.now();
  const logits = model.run({ input }).logits;
  const ms = performance.now() - t0;
  const probs = softmax(logits);
  const best = probs.indexOf(Math.max(...probs));
  digitEl.textContent = String(best);
  bars.forEach(({ bar, value }, d) => {
    bar.firstChild.style.width = `${(probs[d] * 100).toFixed(1)}%`;
    bar.classList.toggle("top", d === best);
    value.textContent = `${(probs[d] * 100).toFixed(1)}%`;
  });
  statusEl.textContent = `inference ${ms < 1 ? (ms * 1000).toFixed(0) + " us" :
    ms.toFixed(2) + " ms"} (wasm, SIMD128)`;
  window.mlccDigits.prediction = { digit: best, probabilities: probs, input: Array.from(input) };
}

function position(event) {
  const r = pad.getBoundingClientRect();
  return [(event.clientX - r.left) * (pad.width / r.width),
          (event.clientY - r.top) * (pad.height / r.height)];
}

let drawing = false;
pad.addEventListener("pointerdown", (e) => {
  drawing = true;
  pad.setPointerCapture?.(e.pointerId);
  strokes.push([position(e)]);
  redraw();
});
pad.addEventListener("pointermove", (e) => {
  if (!drawing) return;
  strokes[strokes.length - 1].push(position(e));
  redraw();
});
const end = () => {
  if (!drawing) return;
  drawing = false;
  predict();
};
pad.addEventListener("pointerup", end);
pad.addEventListener("pointercancel", end);
document.getElementById("clear").addEventListener("click", () => {
  strokes = [];
  redraw();
  predict();
});

window.mlccDigits = { ready: false, prediction: null, error: null };
redraw();
showPreview(new Float32Array(64));
try {
  model = await createModel();          // model/model.wasm and model/weights.bin
  statusEl.textContent = `model ready (${model.inputs[0].name} ` +
    `[${model.inputs[0].shape}] -> ${model.outputs[0].name} [${model.outputs[0].shape}])`;
  window.mlccDigits.ready = true;
} catch (err) {
  statusEl.textContent = `cannot load the model: ${err.message}`;
  window.mlccDigits.error = err.message;
}
