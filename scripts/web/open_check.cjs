#!/usr/bin/env node
// Headless check of the web viewer opening files: serves a trunk-built dist/, opens it in
// headless Chromium, drops each FILE on the canvas (a disk-backed File, as from a real drag) and
// checks that
//   - the page says it opened the file (the viewer logs "opened NAME"), or, with
//     --expect-error TEXT, that it shows an error containing TEXT (e.g. a file too big for the
//     browser);
//   - the page never froze while opening: no main-thread task longer than --max-task-ms
//     (default 100), measured with a PerformanceObserver for long tasks.
// It prints one JSON line per file (open time, longest task, WebAssembly memory, and what the
// app's frames cost: each requestAnimationFrame callback timed, idle before the drop with the
// pointer moved over the page, and while opening) and exits 1 if a check failed.
//
//   trunk build --release                      # dist/ (see README "Web viewer")
//   npm install playwright-core@1              # once; uses Debian's /usr/bin/chromium
//   node scripts/web/open_check.cjs --dist dist tests/fixtures/pytorch/train.pickle
//   truncate -s 3500M /tmp/huge.pickle && \
//     node scripts/web/open_check.cjs --dist dist --expect-error "too big" /tmp/huge.pickle
//
// --gpu-frames also records a Chrome trace and reports what the browser's WebGL took to execute
// each frame (`ContextVk::finishImpl` in the GPU process: with SwiftShader's software WebGL the
// page's frame waits for it, as the compositor reads the canvas back): the frames from the first
// view on, and the median and 90th percentile of the frames repainted after it while the pointer
// moves 30 times over the top bar. It measures a frame's drawing without the noise of the
// page's other work, so two builds can be compared by what they draw.
'use strict';
const fs = require('fs');
const http = require('http');
const os = require('os');
const path = require('path');
const {chromium} = require('playwright-core');

function parseArgs(argv) {
  const o = {dist: 'dist', maxTaskMs: 100, timeoutS: 300, files: [], chromium: '/usr/bin/chromium',
    idleFrames: 10};
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    if (a === '--dist') o.dist = argv[++i];
    else if (a === '--max-task-ms') o.maxTaskMs = Number(argv[++i]);
    else if (a === '--timeout-s') o.timeoutS = Number(argv[++i]);
    else if (a === '--expect-error') o.expectError = argv[++i];
    else if (a === '--chromium') o.chromium = argv[++i];
    else if (a === '--screenshot') o.screenshot = argv[++i];
    else if (a === '--idle-frames') o.idleFrames = Number(argv[++i]);
    else if (a === '--list-tasks') o.listTasks = true;
    else if (a === '--cpu-profile') o.cpuProfile = argv[++i];
    else if (a === '--gl-stats') o.glStats = true;
    else if (a === '--gpu-frames') o.gpuFrames = true;
    else o.files.push(a);
  }
  if (o.files.length === 0) {
    console.error('usage: node scripts/web/open_check.cjs [--dist DIR] [--max-task-ms N] ' +
      '[--expect-error TEXT] [--screenshot PNG] FILE...');
    process.exit(2);
  }
  return o;
}

const TYPES = {'.html': 'text/html', '.js': 'text/javascript', '.wasm': 'application/wasm',
  '.css': 'text/css', '.png': 'image/png', '.ico': 'image/x-icon'};

/// Serves `dir` on a free loopback port.
function serve(dir) {
  const server = http.createServer((req, res) => {
    const rel = decodeURIComponent(new URL(req.url, 'http://x').pathname).replace(/^\/+/, '');
    const file = path.join(path.resolve(dir), rel === '' ? 'index.html' : rel);
    if (!file.startsWith(path.resolve(dir)) || !fs.existsSync(file) || fs.statSync(file).isDirectory()) {
      res.writeHead(404);
      res.end();
      return;
    }
    res.writeHead(200, {'Content-Type': TYPES[path.extname(file)] || 'application/octet-stream'});
    fs.createReadStream(file).pipe(res);
  });
  return new Promise(resolve => server.listen(0, '127.0.0.1', () => resolve(server)));
}

/// Ends the trace `tracer` records and returns what the GPU process's WebGL context took to
/// finish each frame (ms): the first one over 20 ms (the first view) and the next, then the
/// median and 90th percentile of the rest.
async function webglFrameTimes(tracer) {
  const complete = new Promise(resolve => tracer.once('Tracing.tracingComplete', resolve));
  await tracer.send('Tracing.end');
  const {stream} = await complete;
  const chunks = [];
  for (;;) {
    const r = await tracer.send('IO.read', {handle: stream, size: 1 << 20});
    chunks.push(r.base64Encoded ? Buffer.from(r.data, 'base64').toString() : r.data);
    if (r.eof) break;
  }
  await tracer.send('IO.close', {handle: stream});
  const trace = JSON.parse(chunks.join(''));
  const events = Array.isArray(trace) ? trace : trace.traceEvents;
  const finishes = events.filter(e => e.name === 'ContextVk::finishImpl' && e.ph === 'X')
    .sort((a, b) => a.ts - b.ts).map(e => e.dur / 1000);
  const first = finishes.findIndex(ms => ms > 20);
  if (first < 0) return {frames: finishes.length, note: 'no frame took over 20 ms'};
  const rest = finishes.slice(first + 2).sort((a, b) => a - b);
  const at = q => rest.length ? +rest[Math.min(rest.length - 1, Math.floor(q * rest.length))].toFixed(1) : null;
  return {first_view_ms: finishes.slice(first, first + 2).map(ms => +ms.toFixed(1)),
    repaints: rest.length, repaint_median_ms: at(0.5), repaint_p90_ms: at(0.9)};
}

async function checkFile(context, url, file, opts) {
  const page = await context.newPage();
  const logs = [];
  page.on('console', m => logs.push({type: m.type(), text: m.text(), t: Date.now()}));
  page.on('pageerror', e => logs.push({type: 'pageerror', text: String(e.message || e), t: Date.now()}));
  await page.addInitScript(glStats => {
    window.addEventListener('TrunkApplicationStarted', e => { window.__wasm = e.detail && e.detail.wasm; });
    window.__tasks = [];
    new PerformanceObserver(list => {
      for (const e of list.getEntries()) window.__tasks.push([e.startTime, e.duration]);
    }).observe({type: 'longtask', buffered: true});
    // With --gl-stats, what each frame asks of WebGL: triangles drawn, vertex and index bytes
    // uploaded, texture pixels uploaded (a software rasteriser's work grows with each).
    window.__gl = {triangles: 0, buffer_bytes: 0, texture_pixels: 0, draws: 0};
    if (glStats) {
      for (const proto of [WebGL2RenderingContext.prototype, WebGLRenderingContext.prototype]) {
        const wrap = (name, count) => {
          const original = proto[name];
          proto[name] = function (...args) { count(args); return original.apply(this, args); };
        };
        wrap('drawElements', a => { window.__gl.triangles += a[1] / 3; window.__gl.draws += 1; });
        wrap('bufferData', a => { window.__gl.buffer_bytes += a[1] && a[1].byteLength || 0; });
        wrap('texImage2D', a => { if (a.length >= 9) window.__gl.texture_pixels += a[3] * a[4]; });
        wrap('texSubImage2D', a => { if (a.length >= 9) window.__gl.texture_pixels += a[4] * a[5]; });
      }
    }
    // Every animation-frame callback (eframe paints in them) timed: [start, duration], and with
    // --gl-stats what it drew.
    window.__frames = [];
    const raf = window.requestAnimationFrame.bind(window);
    window.requestAnimationFrame = cb => raf(t => {
      const start = performance.now();
      const before = {...window.__gl};
      try { cb(t); } finally {
        const frame = [start, performance.now() - start];
        if (glStats) {
          const drew = {};
          for (const k of Object.keys(before)) drew[k] = Math.round(window.__gl[k] - before[k]);
          if (drew.draws > 0) frame.push(drew);
        }
        window.__frames.push(frame);
      }
    });
  }, Boolean(opts.glStats));
  await page.goto(url);
  await page.waitForFunction(() => !document.getElementById('loading_text'), null, {timeout: 120000});
  await page.waitForTimeout(1000);
  // Idle frames: the pointer moved over the page (each move asks for one repaint), 300 ms apart.
  const idleFrom = await page.evaluate(() => performance.now());
  for (let i = 0; i < opts.idleFrames; i++) {
    await page.mouse.move(300 + 40 * (i % 2), 300);
    await page.waitForTimeout(300);
  }
  await page.evaluate(() => {
    const input = document.createElement('input');
    input.type = 'file';
    input.id = '__file';
    input.style.display = 'none';
    document.body.appendChild(input);
  });
  await page.setInputFiles('#__file', file);
  const name = path.basename(file);
  let profiler = null;
  if (opts.cpuProfile) {
    // V8's sampling profiler over the opening; a 20 ms busy function named __mark_drop marks
    // the drop in it, so the long tasks (times from the drop) can be found in the samples.
    profiler = await page.context().newCDPSession(page);
    await profiler.send('Profiler.enable');
    await profiler.send('Profiler.setSamplingInterval', {interval: 250});
    await profiler.send('Profiler.start');
  }
  let tracer = null;
  if (opts.gpuFrames) {
    tracer = await page.context().newCDPSession(page);
    await tracer.send('Tracing.start', {transferMode: 'ReturnAsStream',
      traceConfig: {includedCategories: ['gpu.angle', 'toplevel']}});
  }
  const t0 = Date.now();
  const dropped = await page.evaluate(profiling => {
    if (profiling) {
      const mark = function __mark_drop() { const end = performance.now() + 20; while (performance.now() < end) {} };
      mark();
    }
    const f = document.getElementById('__file').files[0];
    const dt = new DataTransfer();
    dt.items.add(f);
    const canvas = document.getElementById('the_canvas_id');
    for (const type of ['dragenter', 'dragover', 'drop']) {
      canvas.dispatchEvent(new DragEvent(type, {dataTransfer: dt, bubbles: true, cancelable: true}));
    }
    return performance.now();
  }, Boolean(opts.cpuProfile));
  // eframe's web logger writes the app's errors as console warnings starting "ERROR:".
  const isError = l => l.type === 'error' || l.type === 'pageerror' ||
    (l.type === 'warning' && l.text.startsWith('ERROR:'));
  const wanted = opts.expectError
    ? l => isError(l) && l.text.includes(opts.expectError)
    : l => l.type === 'info' && l.text.includes(`opened ${name}`);
  // A missing favicon is no failure of the app.
  const failed = l => isError(l) && !wanted(l) && !l.text.startsWith('Failed to load resource');
  let status = 'timeout';
  while (Date.now() - t0 < opts.timeoutS * 1000) {
    if (logs.some(wanted)) { status = 'ok'; break; }
    if (logs.some(failed)) { status = 'error'; break; }
    await page.waitForTimeout(100);
  }
  const done = logs.find(wanted);
  // Let the frame that shows the result be drawn (its task counts too).
  await page.waitForTimeout(1500);
  let gpuFrames;
  if (tracer) {
    for (let i = 0; i < 30; i++) {
      await page.mouse.move(1100 + (i % 2) * 7, 28);
      await page.waitForTimeout(150);
    }
    gpuFrames = await webglFrameTimes(tracer);
  }
  const info = await page.evaluate(() => ({
    tasks: window.__tasks,
    frames: window.__frames,
    wasm_memory_bytes: window.__wasm && window.__wasm.memory ? window.__wasm.memory.buffer.byteLength : null,
  }));
  if (opts.screenshot) await page.screenshot({path: opts.screenshot});
  if (profiler) {
    const {profile} = await profiler.send('Profiler.stop');
    fs.writeFileSync(opts.cpuProfile.replace('NAME', name), JSON.stringify(profile));
  }
  const tasks = info.tasks.filter(([start, duration]) => start + duration >= dropped)
    .map(([start, duration]) => [+(start - dropped).toFixed(0), +duration.toFixed(0)]);
  const longest = tasks.reduce((m, [, d]) => Math.max(m, d), 0);
  const opened = done ? dropped + (done.t - t0) : Infinity;
  const frameStats = frames => {
    const d = frames.map(([, duration]) => duration).sort((a, b) => a - b);
    return {count: d.length, median_ms: d.length ? +d[d.length >> 1].toFixed(1) : null,
      max_ms: d.length ? +d[d.length - 1].toFixed(1) : null};
  };
  const idleTasks = info.tasks.filter(([start]) => start >= idleFrom && start < dropped)
    .map(([, duration]) => +duration.toFixed(0));
  const idleFrames = frameStats(info.frames.filter(([start]) => start >= idleFrom && start < dropped));
  const openingFrames = frameStats(info.frames.filter(([start]) => start >= dropped && start < opened));
  const afterFrames = frameStats(info.frames.filter(([start]) => start >= opened));
  await page.close();
  const result = {
    file: name,
    bytes: fs.statSync(file).size,
    status,
    open_s: done ? +((done.t - t0) / 1000).toFixed(2) : null,
    longest_task_ms: longest,
    long_tasks: tasks.length,
    frames_idle: idleFrames,
    long_tasks_idle_ms: idleTasks,
    frames_while_opening: openingFrames,
    frames_after_opening: afterFrames,
    tasks_after_drop: opts.listTasks ? tasks : undefined,
    frames_after_drop: opts.listTasks ? info.frames.filter(([start]) => start >= dropped)
      .map(([start, duration, drew]) => [+(start - dropped).toFixed(0), +duration.toFixed(0)]
        .concat(drew ? [drew] : [])) : undefined,
    gpu_frames: gpuFrames,
    wasm_memory_MB: info.wasm_memory_bytes === null ? null : +(info.wasm_memory_bytes / 2 ** 20).toFixed(0),
    message: (done || logs.find(failed) || {}).text || null,
  };
  result.ok = status === 'ok' && longest <= opts.maxTaskMs;
  return result;
}

(async () => {
  const opts = parseArgs(process.argv.slice(2));
  const server = await serve(opts.dist);
  const url = `http://127.0.0.1:${server.address().port}/`;
  const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'vramscope-check-'));
  const context = await chromium.launchPersistentContext(userDataDir, {
    executablePath: opts.chromium, headless: true, viewport: {width: 1280, height: 720},
    args: ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
      '--disable-component-update', '--disable-sync', '--enable-unsafe-swiftshader'],
  });
  let allOk = true;
  try {
    for (const file of opts.files) {
      const result = await checkFile(context, url, file, opts);
      console.log(JSON.stringify(result));
      allOk = allOk && result.ok;
    }
  } finally {
    await context.close();
    server.close();
    fs.rmSync(userDataDir, {recursive: true, force: true});
  }
  process.exit(allOk ? 0 : 1);
})();
