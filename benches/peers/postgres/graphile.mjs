// graphile-worker's side of run.sh: one row of the comparison, the same work as
// `cargo bench --features postgres --bench postgres -- --peer MODE HANDLERS PROCESSES JOBS`.
//
//   node graphile.mjs CONNECTION_STRING SCHEMA HANDLERS PROCESSES JOBS
//
// The parent migrates a fresh schema, adds JOBS jobs of about 100 bytes with `addJobs` (1,000
// to a call, timed), then starts PROCESSES children (also for one), each a graphile-worker
// runner with `concurrency: HANDLERS`, `localQueue: {size: 500}` and batch delays of 0, whose
// task does nothing but note the job's number. Once all children are ready it tells them to go
// and polls the jobs table every 2 ms until it is empty (graphile-worker deletes a job when
// its completion commits); that is the run's time. Then it stops the children, checks that
// every job ran exactly once (the numbers they noted) and prints one line of key=value fields.
import { fork } from "node:child_process";
import { Logger, makeWorkerUtils, run, runMigrations } from "graphile-worker";

const [connectionString, schema, handlersText, processesText, jobsText, role] =
  process.argv.slice(2);
const handlers = Number(handlersText);
const processes = Number(processesText);
const jobs = Number(jobsText);

if (role === "child") {
  await child();
} else {
  await parent();
}

async function parent() {
  await runMigrations({ connectionString, schema });
  const utils = await makeWorkerUtils({ connectionString, schema });
  const pad = "x".repeat(80);
  let started = process.hrtime.bigint();
  for (let first = 0; first < jobs; first += 1000) {
    const specs = [];
    for (let n = first; n < Math.min(first + 1000, jobs); n++) {
      specs.push({ identifier: "noop", payload: { n, pad } });
    }
    await utils.addJobs(specs);
  }
  const enqueueSeconds = seconds(started);

  const children = [];
  for (let i = 0; i < processes; i++) {
    const args = [connectionString, schema, handlersText, processesText, jobsText, "child"];
    children.push(fork(new URL(import.meta.url).pathname, args));
  }
  await Promise.all(children.map((c) => message(c, "ready")));
  started = process.hrtime.bigint();
  children.forEach((c) => c.send("go"));
  const table = `"${schema}"._private_jobs`;
  for (;;) {
    const { rows } = await utils.withPgClient((client) =>
      client.query(`SELECT count(*)::int AS left FROM ${table}`),
    );
    if (rows[0].left === 0) break;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
  const runSeconds = seconds(started);

  const noted = children.map((c) => message(c, "noted"));
  children.forEach((c) => c.send("stop"));
  const ran = new Uint32Array(jobs);
  for (const { numbers } of await Promise.all(noted)) {
    for (const n of numbers) ran[n] += 1;
  }
  const wrong = ran.findIndex((times) => times !== 1);
  if (wrong !== -1) {
    throw new Error(`job ${wrong} ran ${ran[wrong]} times (each should run exactly once)`);
  }
  await utils.release();
  console.log(
    `system=graphile mode=worker handlers=${handlers} processes=${processes} jobs=${jobs} ` +
      `enqueue_per_s=${Math.round(jobs / enqueueSeconds)} ` +
      `jobs_per_s=${Math.round(jobs / runSeconds)}`,
  );
}

async function child() {
  const numbers = [];
  const go = message(process, "go");
  process.send({ kind: "ready" });
  await go;
  const runner = await run({
    connectionString,
    schema,
    concurrency: handlers,
    maxPoolSize: Math.max(10, handlers),
    noHandleSignals: true,
    pollInterval: 1000,
    logger: new Logger(() => (level, text) => {
      if (level === "error" || level === "warning") console.error(text);
    }),
    taskList: {
      noop: async (payload) => {
        numbers.push(payload.n);
      },
    },
    preset: {
      worker: {
        localQueue: { size: 500 },
        completeJobBatchDelay: 0,
        failJobBatchDelay: 0,
      },
    },
  });
  await message(process, "stop");
  await runner.stop();
  process.send({ kind: "noted", numbers }, () => process.exit(0));
}

// The next message of `kind` from `from` (a child process, or this process's parent).
function message(from, kind) {
  return new Promise((resolve) => {
    const listener = (received) => {
      const got = typeof received === "string" ? { kind: received } : received;
      if (got.kind === kind) {
        from.off("message", listener);
        resolve(got);
      }
    };
    from.on("message", listener);
  });
}

function seconds(since) {
  return Number(process.hrtime.bigint() - since) / 1e9;
}
