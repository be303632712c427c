// spindle ui in a real browser: Debian's chromium driven by playwright-core.
//
// Fills a store (a pipeline run with a failed node, a skipped one and an error handler; the
// `dashboard` example's queues, dead letters, processes, workflows and writer token), starts
// `spindle ui --allow-actions` on it, then opens every page, follows a run to its graph and a
// node to its output, watches a node turn from running to complete while a pipeline runs in
// another process (without reloading), checks that an action without a signed-in token is
// refused and writes nothing, signs in and requeues a dead letter that then leaves the list.
// A screenshot of each page goes to tests/e2e/screenshots/.
//
//   node tests/e2e/ui.mjs         (after `cargo test`, which builds the binary and example)
//
// CARGO_TARGET_DIR is followed; SPINDLE_BIN, DASHBOARD_BIN and CHROMIUM name other builds or
// browsers.

import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import assert from 'node:assert/strict';
import { chromium } from 'playwright-core';

const here = dirname(fileURLToPath(import.meta.url));
const root = resolve(here, '..', '..');
const target = resolve(root, process.env.CARGO_TARGET_DIR ?? 'target');
const bin = process.env.SPINDLE_BIN ?? join(target, 'debug/spindle');
const dashboardBin = process.env.DASHBOARD_BIN ?? join(target, 'debug/examples/dashboard');
const browserPath = process.env.CHROMIUM ?? '/usr/bin/chromium';
const shots = join(here, 'screenshots');
const WAIT_MS = 20_000;

const work = mkdtempSync(join(tmpdir(), 'spindle-e2e-'));
const db = join(work, 'spindle.db');
const go = join(work, 'GO');
const children = [];
let browser;

function cleanUp() {
  for (const child of children) child.kill('SIGKILL');
  rmSync(work, { recursive: true, force: true });
}

/** Runs a command to its end; returns its status and output. */
function run(command, args) {
  const done = spawnSync(command, args, { cwd: work, encoding: 'utf8' });
  if (done.error) throw done.error;
  return done;
}

/** Writes a pipeline file into the scratch directory; returns its path. */
function pipeline(name, nodes) {
  const path = join(work, `${name}.json`);
  writeFileSync(path, JSON.stringify({ name, nodes }));
  return path;
}

/** Starts `spindle ui` and resolves with its base URL. */
function startUi() {
  const child = spawn(bin, ['--db', db, 'ui', '--addr', '127.0.0.1:0', '--allow-actions'], {
    cwd: work,
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  children.push(child);
  return new Promise((resolveUrl, reject) => {
    let out = '';
    child.stdout.on('data', (chunk) => {
      out += chunk;
      const found = out.match(/spindle ui: (http:\/\/[^/\s]+)\//);
      if (found) resolveUrl(found[1]);
    });
    child.on('exit', (code) => reject(new Error(`spindle ui exited with ${code}: ${out}`)));
  });
}

function fill() {
  const release = pipeline('release', {
    fetch: { run: 'echo fetched 12 files' },
    test: { run: "echo 'running 3 tests'; echo 'assertion failed: 2 + 2 == 5' >&2; exit 1", after: ['fetch'] },
    package: { run: 'echo packaged', after: ['test'] },
    notify: { run: 'echo the tests failed', after: [{ node: 'test', on: 'error' }] },
  });
  // The error handler takes test's failure: the run completes, package is skipped.
  const handled = run(bin, ['--db', db, 'run', release]);
  assert.equal(handled.status, 0, `the release run ends: ${handled.stderr}`);
  const nightly = pipeline('nightly', {
    build: { run: 'echo built' },
    deploy: { run: "echo 'deploy: permission denied' >&2; exit 2", after: ['build'] },
  });
  const failed = run(bin, ['--db', db, 'run', nightly]);
  assert.equal(failed.status, 1, `the nightly run fails: ${failed.stderr}`);
  const filled = run(dashboardBin, [db]);
  assert.equal(filled.status, 0, `the dashboard example: ${filled.stderr}`);
  const scheduled = run(bin, ['--db', db, 'queue', 'schedules', 'put', 'nightly-report', '--queue', 'reports',
    '--cron', '0 3 * * *', '--tz', 'Europe/Paris']);
  assert.equal(scheduled.status, 0, `a schedule is put: ${scheduled.stderr}`);
  const token = filled.stdout.match(/token: (spn_\S+)/)?.[1];
  assert.ok(token, 'the example prints a token');
  return token;
}

/** Waits for `selector`, then saves the page as `name`.png. */
async function shoot(page, name, selector) {
  await page.waitForSelector(selector, { timeout: WAIT_MS });
  await page.screenshot({ path: join(shots, `${name}.png`), fullPage: true });
}

async function main() {
  for (const file of [bin, dashboardBin, browserPath]) {
    assert.ok(existsSync(file), `${file} is missing (run cargo test first; install chromium)`);
  }
  mkdirSync(shots, { recursive: true });
  const token = fill();
  const base = await startUi();
  browser = await chromium.launch({
    executablePath: browserPath,
    args: ['--no-sandbox', '--disable-background-networking'],
  });
  const page = await browser.newPage({ viewport: { width: 1400, height: 900 } });
  const problems = [];
  page.on('pageerror', (error) => problems.push(`page error: ${error.message}`));
  page.on('console', (message) => {
    // A refused request logs its status: those the test provokes on purpose, and a live
    // stream the server has no room for yet (closed pages' streams are noticed within seconds;
    // the page polls meanwhile).
    const text = message.text();
    const provoked = /status of 40[13]/.test(text);
    const busy = /status of 503/.test(text) && message.location().url.includes('/api/live');
    if (message.type() === 'error' && !provoked && !busy) {
      problems.push(`console: ${text} (${message.location().url})`);
    }
  });

  await overview(page, base);
  const runId = await runsToGraph(page, base);
  await nodePanel(page, runId);
  await liveRun(page, base);
  await queues(page, base, token);
  await runQueue(page, base, runId);
  await otherPages(page, base);
  assert.deepEqual(problems, [], 'no script errors in any page');
  await errors(page, base);
  const unexpected = problems.filter((problem) => !/status of 404/.test(problem));
  assert.deepEqual(unexpected, [], 'an unknown address is a 404 page, nothing worse');
  console.log(`e2e: every page checked; screenshots in ${shots}`);
}

async function overview(page, base) {
  await page.goto(`${base}/`);
  await shoot(page, 'overview', '[data-testid=overview]');
  const text = await page.textContent('[data-testid=overview]');
  assert.match(text, /failed/i, 'the overview counts the failed run');
  assert.match(text, /mail/, 'the overview lists the mail queue');
}

/** From the runs list to the failed run's graph; returns the run's id. */
async function runsToGraph(page, base) {
  await page.goto(`${base}/runs`);
  await shoot(page, 'runs', '[data-testid=runs-table] tbody tr');
  const row = page.locator('[data-testid=runs-table] tbody tr', { hasText: 'release' }).first();
  await row.locator('a').first().click();
  await page.waitForURL(/\/runs\/[0-9a-f-]+/, { timeout: WAIT_MS });
  const runId = new URL(page.url()).pathname.split('/')[2];
  await page.waitForSelector('g.node[data-node=test][data-status=failed]', { timeout: WAIT_MS });
  await page.waitForSelector('g.node[data-node=package][data-status=skipped]');
  await page.waitForSelector('g.node[data-node=notify][data-status=complete]');
  await page.waitForSelector('g.node[data-node=fetch][data-status=complete]');
  await shoot(page, 'graph', 'svg g.node');
  return runId;
}

/** A click on the failed node shows its error and what it printed. */
async function nodePanel(page, runId) {
  await page.click('g.node[data-node=test]');
  const panel = page.locator('[data-testid=node-panel]');
  await panel.waitFor({ timeout: WAIT_MS });
  await page.waitForFunction(
    () => document.querySelector('[data-testid=node-panel]')?.textContent.includes('assertion failed'),
    null,
    { timeout: WAIT_MS },
  );
  const text = await panel.textContent();
  assert.match(text, /failed/i, 'the panel gives the status');
  assert.match(text, /running 3 tests/, 'the panel shows the output');
  assert.ok(runId.length > 10);
  await shoot(page, 'graph-node', '[data-testid=node-panel]');
}

/** A pipeline in another process: its graph view turns a node from running to complete. */
async function liveRun(page, base) {
  const live = pipeline('live', {
    prepare: { run: 'echo ready' },
    wait: { run: `while [ ! -f '${go}' ]; do sleep 0.1; done; echo went`, after: ['prepare'] },
    finish: { run: 'echo finished', after: ['wait'] },
  });
  const running = spawn(bin, ['--db', db, 'run', live], { cwd: work, stdio: 'ignore' });
  children.push(running);
  const ended = new Promise((done) => running.on('exit', done));
  await page.goto(`${base}/runs?name=live`);
  const link = page.locator('[data-testid=runs-table] tbody tr a').first();
  await link.waitFor({ timeout: WAIT_MS });
  await link.click();
  await page.waitForSelector('g.node[data-node=wait][data-status=running]', { timeout: WAIT_MS });
  // Updates come by Server-Sent Events, not by the polling the page falls back to.
  await page.waitForSelector('[data-testid=live-state][data-state=live]', { timeout: WAIT_MS });
  await page.evaluate(() => { window.__notReloaded = true; });
  await shoot(page, 'graph-live', 'g.node[data-node=wait][data-status=running]');
  writeFileSync(go, '');
  await page.waitForSelector('g.node[data-node=wait][data-status=complete]', { timeout: WAIT_MS });
  await page.waitForSelector('g.node[data-node=finish][data-status=complete]', { timeout: WAIT_MS });
  assert.equal(await page.evaluate(() => window.__notReloaded), true, 'updated without a reload');
  assert.equal(await ended, 0, 'the live run completes');
}

/** Dead letters: an action without a token is refused; signed in, a requeue leaves the list. */
async function queues(page, base, token) {
  await page.goto(`${base}/queues`);
  await shoot(page, 'queues', '[data-testid=queues-table] tbody tr');
  await page.locator('[data-testid=queues-table] a', { hasText: 'mail' }).first().click();
  await page.waitForURL(/\/queues\/mail/);
  const rows = '[data-testid=dead-table] tbody tr';
  await page.waitForSelector(rows, { timeout: WAIT_MS });
  assert.equal(await page.locator(rows).count(), 3, 'three dead letters');
  await shoot(page, 'queue', rows);

  // Not signed in: the server refuses, and nothing is written.
  const refused = await page.evaluate(async (path) => {
    const session = await (await fetch('/api/session')).json();
    const answer = await fetch(path, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', 'X-Spindle-Csrf': session.csrf },
      body: '{}',
    });
    return answer.status;
  }, '/api/queues/mail/requeue-all');
  assert.equal(refused, 401, 'an action without a signed-in token is refused');
  await page.locator(rows).first().locator('[data-testid=requeue]').click();
  await page.waitForSelector('[data-testid=signin-token]', { state: 'visible', timeout: WAIT_MS });
  await page.reload();
  await page.waitForSelector(rows, { timeout: WAIT_MS });
  assert.equal(await page.locator(rows).count(), 3, 'still three dead letters');

  // Signed in as a writer: the requeued letter leaves the list.
  await page.fill('[data-testid=signin-token]', token);
  await page.click('[data-testid=signin-submit]');
  await page.waitForSelector('[data-testid=signed-in]', { timeout: WAIT_MS });
  const url = page.url();
  assert.ok(!url.includes(token), 'the token is never in the URL');
  const stored = await page.evaluate(() => JSON.stringify({ ...localStorage }) + JSON.stringify({ ...sessionStorage }) + document.cookie);
  assert.ok(!stored.includes(token), 'the token is never in the browser storage');
  const first = await page.locator(rows).first().getAttribute('data-id');
  await page.locator(rows).first().locator('[data-testid=requeue]').click();
  await page.waitForFunction(
    ([selector, id]) => document.querySelectorAll(selector).length === 2
      && ![...document.querySelectorAll(selector)].some((row) => row.dataset.id === id),
    [rows, first],
    { timeout: WAIT_MS },
  );
  await shoot(page, 'queue-requeued', rows);

  // The tag and metadata boxes narrow the live items: the digests carry metadata
  // {"digest": n, "plan": "pro"}; `digest=1` is the number (JSON), `digest="1"` a string.
  const pending = '[data-testid=pending-table] tbody tr[data-id]';
  const pendingCount = () => page.locator(pending).count();
  const all = await page.evaluate(async () => (await (await fetch('/api/queues/mail/items?status=pending')).json()).items.length);
  const narrowed = async (tag, meta, count, why) => {
    await page.fill('[data-testid=queue-tag]', tag);
    await page.fill('[data-testid=queue-meta]', meta);
    await page.waitForFunction(
      ([selector, n]) => document.querySelectorAll(selector).length === n,
      [pending, count],
      { timeout: WAIT_MS },
    ).catch(async () => assert.fail(`${why}: ${await pendingCount()} rows, not ${count}`));
  };
  await narrowed('', 'digest=1', 1, 'the metadata box');
  await narrowed('', 'digest="1"', 0, 'a string is not the number');
  await narrowed('digest', 'plan=pro', 2, 'the tag and the metadata together');
  await shoot(page, 'queue-filtered', pending);
  const statsText = await page.locator('[data-testid=queue-stats]').textContent();
  assert.ok(!statsText.includes('null'), `no "null" among the stats: ${statsText}`);
  await narrowed('', '', all, 'the boxes emptied');

  // Pause: the button turns to Resume and the stats show the queue paused; Resume undoes it.
  const pause = page.locator('[data-testid=queue-pause]');
  assert.equal((await pause.textContent()).trim(), 'Pause');
  await pause.click();
  await page.waitForSelector('[data-testid=queue-stats] [data-status=paused]', { timeout: WAIT_MS });
  await page.waitForFunction(() => document.querySelector('[data-testid=queue-pause]')?.textContent === 'Resume', null, { timeout: WAIT_MS });
  const stats = await page.evaluate(async () => (await (await fetch('/api/queues')).json()).find((q) => q.queue === 'mail'));
  assert.equal(stats.paused, true, 'the store has it paused');
  await shoot(page, 'queue-paused', '[data-testid=queue-stats]');
  await pause.click();
  await page.waitForFunction(() => document.querySelector('[data-testid=queue-pause]')?.textContent === 'Pause', null, { timeout: WAIT_MS });
  assert.equal(await page.locator('[data-testid=queue-stats] [data-status=paused]').count(), 0, 'running again');
}

/** A run's queue, signed in as a writer: no actions (the server refuses them: the items are
 * the run's), and the page says what to do instead. */
async function runQueue(page, base, runId) {
  await page.goto(`${base}/queues/${encodeURIComponent(`run:${runId}`)}`);
  const note = page.locator('[data-testid=run-queue-note]');
  await note.waitFor({ timeout: WAIT_MS });
  assert.match(await note.textContent(), /spindle retry/, 'the page says how to run failed nodes again');
  await page.waitForSelector('[data-testid=signed-in]', { timeout: WAIT_MS });
  assert.equal(await page.locator('[data-testid=queue-actions]').isVisible(), false, 'no queue actions');
  assert.equal(await page.locator('[data-testid=requeue], [data-testid=cancel]').count(), 0, 'no row actions');
}

async function otherPages(page, base) {
  for (const [name, path, selector, expected] of [
    ['schedules', '/schedules', '[data-testid=schedules-table] tbody tr', /nightly-report.*cron "0 3 \* \* \*" \(Europe\/Paris\).*reports/s],
    ['processes', '/processes?status=any', '[data-testid=processes-table] tbody tr', /agent-7/],
    ['workflows', '/workflows', '[data-testid=workflows-table] tbody tr', /deploy/],
    ['events', '/events', '[data-testid=events-table] tbody tr', /\w+/],
    ['tenants', '/tenants', '[data-testid=tokens-table] tbody tr', /dashboard/],
  ]) {
    await page.goto(`${base}${path}`);
    await shoot(page, name, selector);
    assert.match(await page.textContent('main'), expected, `${name} shows its rows`);
    assert.doesNotMatch(await page.textContent('main'), /\[object /, `${name} shows values, not objects`);
  }
  // A workflow execution: its state, events and snapshot.
  await page.goto(`${base}/workflows`);
  await page.locator('[data-testid=workflows-table] tbody tr a', { hasText: /./ }).first().click();
  await page.waitForURL(/\/workflows\/.+/);
  await shoot(page, 'workflow', '[data-testid=workflow-events] tbody tr');
  // The events page follows commits live, and filters what it shows.
  await page.goto(`${base}/events`);
  const events = '[data-testid=events-table] tbody tr';
  await page.waitForSelector(events, { timeout: WAIT_MS });
  const tail = pipeline('tail', { hello: { run: 'echo hello from tail' } });
  assert.equal(run(bin, ['--db', db, 'run', tail]).status, 0);
  await page.waitForFunction(
    (selector) => [...document.querySelectorAll(selector)].some((row) => row.textContent.includes('hello from tail')),
    events,
    { timeout: WAIT_MS },
  );
  await page.fill('[data-testid=events-filter]', 'dead_lettered');
  await page.waitForFunction(
    (selector) => {
      const rows = [...document.querySelectorAll(selector)].filter((row) => row.offsetParent !== null);
      return rows.length > 0 && rows.every((row) => row.textContent.includes('dead_lettered'));
    },
    events,
    { timeout: WAIT_MS },
  );
}

/** Bad addresses are pages that say what is wrong, never a blank page. */
async function errors(page, base) {
  await page.goto(`${base}/runs/no-such-run`);
  await page.waitForSelector('[data-testid=error]', { timeout: WAIT_MS });
  assert.match(await page.textContent('[data-testid=error]'), /no graph|not found|no such/i);
  const missing = await page.goto(`${base}/no/such/page`);
  assert.equal(missing.status(), 404);
  await page.waitForSelector('[data-testid=error]', { timeout: WAIT_MS });
  await shoot(page, 'error', '[data-testid=error]');
}

try {
  await main();
} catch (error) {
  console.error(error);
  process.exitCode = 1;
} finally {
  if (browser) await browser.close();
  cleanUp();
}
