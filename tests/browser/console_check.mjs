// Drives Debian's chromium (headless, through playwright-core) against a
// running flowwarden's console, as an operator would, and fails (exit 1) at
// the first thing that is not as the operator should see it.
// tests/integration/test_console.py starts flowwarden and the stand-in, fills
// the DLQ and runs this with:
//   FW_URL          the console, e.g. http://127.0.0.1:PORT
//   FW_TOKEN        the admin token the instance was started with
//   FW_SLOW         a stream whose event in flight makes its lag grow
//   FW_PAUSE        a stream to pause and resume
//   FW_FIND_TYPE    an error type the filter finds exactly one PENDING entry of:
//   FW_FIND_ID      that entry's _id (it is replayed and must leave the list)
//   FW_OTHER_ID     a PENDING entry of another type (the filter leaves it out)
//   FW_XSS_ID       an entry whose document and error hold markup
//   FW_SHOTS        a directory for screenshots of each view, or empty
//   FW_CHROMIUM     the browser (default /usr/bin/chromium)
// Each step prints one line "ok: ..." as it passes.
import { chromium } from "playwright-core";
import path from "node:path";

const env = process.env;
const URL = env.FW_URL;
const STEP_MS = 30000;

function ok(what) {
  console.log("ok: " + what);
}

function fail(what) {
  throw new Error(what);
}

// Polls fn until it returns a truthy value, at most ms.
async function until(what, fn, ms = STEP_MS) {
  const deadline = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > deadline) fail("timed out waiting for " + what);
    await new Promise((r) => setTimeout(r, 100));
  }
}

async function shot(page, name) {
  if (!env.FW_SHOTS) return;
  await page.screenshot({ path: path.join(env.FW_SHOTS, name), fullPage: false });
}

const browser = await chromium.launch({
  executablePath: env.FW_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
const errors = [];
const dialogs = [];
const outside = [];

try {
  const context = await browser.newContext({ viewport: { width: 1180, height: 760 } });
  const page = await context.newPage();
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push("page error: " + e.message));
  page.on("dialog", (d) => { dialogs.push(d.message()); d.dismiss().catch(() => {}); });
  page.on("request", (r) => { if (!r.url().startsWith(URL)) outside.push(r.url()); });

  // 1. The page loads, draws the streams, and logs no error.
  await page.goto(URL + "/");
  const slowRow = `#streams tbody tr[data-stream="${env.FW_SLOW}"]`;
  await page.waitForSelector(slowRow, { timeout: STEP_MS });
  if (errors.length) fail("console errors on load: " + errors.join(" | "));
  ok("page loaded with no console error");

  // 2. The slow stream's lag is refreshed: two different non-zero readings.
  const lagOf = () => page.textContent(slowRow + ' td[data-field="lag"]');
  const first = await until("a lag above zero", async () => {
    const t = await lagOf();
    return t && t !== "0 ms" && t !== "–" ? t : null;
  });
  const second = await until("the lag to change from " + first, async () => {
    const t = await lagOf();
    return t !== first ? t : null;
  });
  ok(`lag updated: ${first} -> ${second}`);
  await until("the chart's samples", () => page.evaluate(async () => {
    const r = await fetch("/v1/history");
    const h = await r.json();
    return Object.values(h.streams).some((s) => s.t.length >= 2);
  }), 20000);
  await page.selectOption("#chart-stream", env.FW_SLOW);
  await until("the chart to draw two samples", async () =>
    Number(await page.getAttribute("#chart", "data-samples")) >= 2);
  ok("the chart drew the stream's samples");
  await shot(page, "console-streams.png");

  // 3. Actions without the token, or with a wrong one, are refused (401 with why).
  const tried = await page.evaluate(async (stream) => {
    const p = "/v1/streams/" + stream + "/pause";
    const none = await fetch(p, { method: "POST" });
    const wrong = await fetch(p, { method: "POST", headers: { Authorization: "Bearer nope" } });
    return [none.status, (await none.json()).error, wrong.status, (await wrong.json()).error];
  }, env.FW_PAUSE);
  if (tried[0] !== 401 || !/sent no token/.test(tried[1])) fail("no token: " + tried.slice(0, 2));
  if (tried[2] !== 401 || !/sent a wrong token/.test(tried[3])) fail("wrong token: " + tried.slice(2));
  ok("POST without or with a wrong token refused: " + tried[1] + " / " + tried[3]);

  // ... and through the page: the token is asked for, a wrong one is refused,
  // the right one pauses the stream; resume needs no second asking.
  const pauseRow = `#streams tbody tr[data-stream="${env.FW_PAUSE}"]`;
  await page.click(pauseRow + " button:has-text('Pause')");
  await page.waitForSelector("#token-form:not([hidden])");
  await page.fill("#token-input", "not-the-token");
  await page.click("#token-form button[type=submit]");
  await until("the refusal to be shown", async () =>
    /sent a wrong token/.test(await page.textContent("#notice")) &&
    await page.isVisible("#token-form"));
  await page.fill("#token-input", env.FW_TOKEN);
  await page.click("#token-form button[type=submit]");
  await until("the stream to show paused", async () =>
    /paused/.test(await page.textContent(pauseRow + ' td[data-field="state"]')));
  await page.click(pauseRow + " button:has-text('Resume')");
  await until("the stream to run again", async () =>
    /running/.test(await page.textContent(pauseRow + ' td[data-field="state"]')));
  if (await page.isVisible("#token-form")) fail("the token was asked for twice");
  ok("the page asked for the token once, refused a wrong one, paused and resumed");

  // 4. A dead letter found by filter, shown, dry-run, replayed: it leaves the list.
  await page.click("#tab-dlq");
  await page.selectOption("#f-status", "PENDING");
  await page.fill("#f-error-type", env.FW_FIND_TYPE);
  await page.click("#dlq-search");
  const findRow = `#dlq tbody tr[data-id="${env.FW_FIND_ID}"]`;
  await until("the filtered list", async () =>
    /error_type=/.test(await page.getAttribute("#dlq", "data-query")));
  await page.waitForSelector(findRow);
  const ids = await page.$$eval("#dlq tbody tr", (rows) => rows.map((r) => r.dataset.id));
  if (ids.length !== 1 || ids.includes(env.FW_OTHER_ID)) fail("filter found " + ids);
  await page.click(findRow);
  await page.waitForSelector("#entry:not([hidden])");
  const shown = await page.textContent("#entry-fields");
  if (!shown.includes(env.FW_FIND_TYPE)) fail("entry shows no error type: " + shown);
  await shot(page, "console-dead-letters.png");
  await page.click("#entry-dry-run");
  await until("the dry run's answer", async () =>
    /dry run/.test(await page.textContent("#entry-result")));
  if (!(await page.isVisible(findRow))) fail("a dry run removed the entry");
  await page.click("#entry-replay");
  await until("the replayed entry to leave the list", async () => !(await page.$(findRow)), 60000);
  ok("dead letter " + env.FW_FIND_ID + " found by filter, shown, dry run, replayed, gone");

  // 5. Markup in a document or an error is text: nothing runs, no element is made.
  await page.fill("#f-error-type", "");
  await page.click("#dlq-search");
  await until("the unfiltered list", async () =>
    !/error_type=/.test(await page.getAttribute("#dlq", "data-query")));
  const xssRow = `#dlq tbody tr[data-id="${env.FW_XSS_ID}"]`;
  await page.waitForSelector(xssRow);
  await page.click(xssRow);
  await page.waitForSelector("#entry-documents:not([hidden])");
  await page.click("#entry-documents");
  await until("the document to replace the hidden note", async () =>
    !/^Hidden/.test(await page.textContent("#entry-document")));
  await page.waitForLoadState("networkidle");
  const made = await page.evaluate(() => ({
    imgs: document.querySelectorAll("img, script:not([src])").length,
    flag: window.__pwned === undefined ? null : String(window.__pwned),
  }));
  if (made.imgs || made.flag !== null || dialogs.length) {
    fail(`markup ran: ${JSON.stringify(made)} dialogs=${dialogs}`);
  }
  const docText = await page.textContent("#entry-document");
  if (!docText.includes("<img src=x")) fail("the document's markup is not shown as text");
  const fieldsText = await page.textContent("#entry-fields");
  if (!fieldsText.includes("<script>")) fail("the error's markup is not shown as text");
  ok("a document holding <img onerror> and an error holding <script> showed as text; nothing ran");
  await shot(page, "console-entry.png");

  // 6. A phone's width: the streams as cards.
  if (env.FW_SHOTS) {
    const phone = await browser.newContext({ viewport: { width: 390, height: 760 },
                                             deviceScaleFactor: 1, isMobile: true });
    const p2 = await phone.newPage();
    await p2.goto(URL + "/");
    await p2.waitForSelector(slowRow);
    await shot(p2, "console-phone.png");
    await phone.close();
  }

  // Nothing but the refused requests' 401s was logged, nothing left the origin.
  const unexpected = errors.filter((e) => !/status of 401/.test(e));
  if (unexpected.length) fail("console errors: " + unexpected.join(" | "));
  if (outside.length) fail("requests to other origins: " + outside.join(", "));
  ok("no console error and no request to another origin");
  await context.close();
} finally {
  await browser.close();
}
