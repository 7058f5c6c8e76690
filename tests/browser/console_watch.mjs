// Keeps one headless chromium tab on a console for FW_SECONDS seconds, as an
// operator watching a stream would (bench/console_overhead.py). Prints
// "watching" once the page shows its streams, "done" at the end.
import { chromium } from "playwright-core";

const env = process.env;
const browser = await chromium.launch({
  executablePath: env.FW_CHROMIUM || "/usr/bin/chromium",
  args: ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1180, height: 760 } });
  await page.goto(env.FW_URL + "/");
  await page.waitForSelector("#streams tbody tr", { timeout: 30000 });
  console.log("watching");
  await new Promise((r) => setTimeout(r, Number(env.FW_SECONDS || 30) * 1000));
  console.log("done");
} finally {
  await browser.close();
}
