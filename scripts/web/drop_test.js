// Web viewer check: opens the trunk-built page in headless Chromium, drops a capture and a
// snapshot on the canvas (as a user drags files onto the page) and screenshots what it shows.
//
//   trunk build                                   # dist/ (offline; see README "Web viewer")
//   cp CAPTURE.vramcap dist/demo.vramcap; cp tests/fixtures/cases/fragmentation.pickle dist/frag.pickle
//   (cd dist && python3 -m http.server 8765 --bind 127.0.0.1) &
//   npm install playwright-core@1 && node scripts/web/drop_test.js   # needs /usr/bin/chromium
//
// Screenshots go to /tmp/shots/web-capture.png and /tmp/shots/web-snapshot.png; the page's
// console (errors, panics) is printed.
const { chromium } = require('playwright-core');
(async () => {
  const browser = await chromium.launch({
    executablePath: '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-quic', '--no-first-run', '--disable-background-networking',
           '--disable-component-update', '--disable-sync', '--enable-unsafe-swiftshader'],
  });
  const page = await browser.newPage({ viewport: { width: 1280, height: 800 } });
  const logs = [];
  page.on('console', m => logs.push(m.type() + ': ' + m.text()));
  page.on('pageerror', e => logs.push('pageerror: ' + e.message));
  await page.goto('http://127.0.0.1:8765/');
  await page.waitForSelector('#the_canvas_id');
  await page.waitForTimeout(4000);
  for (const [url, name, shot] of [['/demo.vramcap', 'demo-day.vramcap', 'web-capture.png'],
                                   ['/frag.pickle', 'fragmentation.pickle', 'web-snapshot.png']]) {
    await page.evaluate(async ([url, name]) => {
      const bytes = await (await fetch(url)).arrayBuffer();
      const dt = new DataTransfer();
      dt.items.add(new File([bytes], name));
      const canvas = document.getElementById('the_canvas_id');
      for (const type of ['dragenter', 'dragover', 'drop']) {
        canvas.dispatchEvent(new DragEvent(type, { dataTransfer: dt, bubbles: true, cancelable: true }));
      }
    }, [url, name]);
    await page.waitForTimeout(8000);
    require('fs').mkdirSync('/tmp/shots', { recursive: true });
    await page.screenshot({ path: '/tmp/shots/' + shot });
  }
  console.log(logs.filter(l => !l.includes('GPU stall')).join('\n'));
  await browser.close();
})();
