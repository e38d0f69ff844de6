// BullMQ's side of `emq bench peers` (emq/bench/peers.py runs it; see that module's docstring).
//
//   node peers_bullmq.mjs load  BULLMQ_DIR REDIS_URL QUEUES JOBS_PER_QUEUE SINK_BASE BODY [FIRST]
//   node peers_bullmq.mjs work  BULLMQ_DIR REDIS_URL QUEUES CONCURRENCY [fetch|undici] [LIMIT]
//
// load: addBulk JOBS_PER_QUEUE jobs to each of QUEUES queues (peers-0 .. peers-<QUEUES-1>), each
//   job {url, body}: a POST of BODY to SINK_BASE/t/peers-<i>; prints {"added": N}. With FIRST,
//   peers-0 gets FIRST jobs instead (the paced workload's flooding tenant).
// work with LIMIT: each Worker is rate-limited to LIMIT jobs a second (BullMQ's limiter, per
//   queue): the paced workload of `emq bench peers --workload paced` (emq/bench/peers_paced.py).
// work: one Worker per queue with CONCURRENCY, created with autorun off; prints "ready" and starts
//   them when a line arrives on stdin (the benchmark starts its CPU meter in between), so that
//   what is measured is the delivering, not Node's start-up. Runs until SIGTERM. The processor
//   POSTs with Node's global fetch (undici's fetch) or with undici's request() (its lean API);
//   keep-alive connections pooled per origin either way.
// bullmq (and undici) are loaded from BULLMQ_DIR/node_modules (a cache outside the repository), not from here.

import { createRequire } from 'node:module';
import path from 'node:path';
import readline from 'node:readline';

const [mode, dir, redisUrl, queueCount, arg] = process.argv.slice(2);
const require = createRequire(path.join(dir, 'package.json'));
const { Queue, Worker } = require('bullmq');

const url = new URL(redisUrl);
const connection = {
  host: url.hostname,
  port: Number(url.port),
  db: Number(url.pathname.slice(1) || 0),
  maxRetriesPerRequest: null, // what BullMQ's Workers require
};
const names = Array.from({ length: Number(queueCount) }, (_, i) => `peers-${i}`);

async function load(perQueue, sinkBase, body, first) {
  let added = 0;
  for (const name of names) {
    const queue = new Queue(name, { connection });
    const target = `${sinkBase}/t/${name}`;
    const count = name === 'peers-0' && first > 0 ? first : perQueue;
    for (let start = 0; start < count; start += 1000) {
      const n = Math.min(1000, count - start);
      const jobs = Array.from({ length: n }, () => ({
        name: 'push',
        data: { url: target, body },
        opts: { removeOnComplete: true, removeOnFail: true },
      }));
      await queue.addBulk(jobs);
      added += n;
    }
    await queue.close();
  }
  process.stdout.write(JSON.stringify({ added }) + '\n');
}

async function pushFetch(job) {
  // Node's fetch (undici): keep-alive connections pooled per origin.
  const res = await fetch(job.data.url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: job.data.body,
  });
  await res.arrayBuffer(); // read to the end: the connection goes back to the pool
  if (res.status >= 300) throw new Error(`status ${res.status}`);
}

function pushUndici() {
  const { Agent, request } = require('undici');
  const dispatcher = new Agent({ keepAliveTimeout: 30_000 });
  return async (job) => {
    const res = await request(job.data.url, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: job.data.body,
      dispatcher,
    });
    await res.body.arrayBuffer();
    if (res.statusCode >= 300) throw new Error(`status ${res.statusCode}`);
  };
}

async function work(concurrency, client, limit) {
  const push = client === 'undici' ? pushUndici() : pushFetch;
  const limiter = limit > 0 ? { limiter: { max: limit, duration: 1000 } } : {};
  const workers = names.map(
    (name) => new Worker(name, push, { connection, concurrency, autorun: false, ...limiter }),
  );
  const stop = async () => {
    await Promise.all(workers.map((w) => w.close(true)));
    process.exit(0);
  };
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
  await Promise.all(workers.map((w) => w.waitUntilReady()));
  const lines = readline.createInterface({ input: process.stdin });
  lines.once('line', () => workers.forEach((w) => w.run()));
  process.stdout.write('ready\n');
}

if (mode === 'load') {
  const [, , , , , sinkBase, body, first] = process.argv.slice(2);
  await load(Number(arg), sinkBase, body, Number(first || 0));
  process.exit(0);
} else if (mode === 'work') {
  await work(Number(arg), process.argv[7] || 'fetch', Number(process.argv[8] || 0));
} else {
  process.stderr.write(`unknown mode ${mode}\n`);
  process.exit(2);
}
