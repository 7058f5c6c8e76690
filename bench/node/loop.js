#!/usr/bin/env node
// The hand-written Node.js consumer flowwarden is compared with (run by bench/run_bench.py),
// using the npm `mongodb` driver installed in bench/node/node_modules.
//
//   node bench/node/loop.js --uri URI --db DB --coll COLL [--resume-after JSON_TOKEN]
//        [--events N] [--scenario s1|s2|s3|s6|s7] [--save-every K] [--name STREAM] [--latency]
//        [--http-url URL]
//
// Same contract as bench/pymongo_loop.py: the scenario's work in a JS function per change, and
// every --save-every events an updateOne upsert of {_id: name} in DB._fw_checkpoints with
// lastProcessedToken, lastSeenToken and updatedAt. Throughput mode prints one JSON line
// {events, open_ns, first_ns, last_ns, hwm_kb, checksum} (monotonic clock; open_ns just before
// the change stream is opened; hwm_kb = VmHWM, this process's peak RSS); --latency prints "ready" and then
// "<seq> <t_us>" per event as the handler starts, until SIGTERM.
//
// S6 and S7 (bench/io_scenarios.py) await one round trip per event: S6 an updateOne upsert
// {_id: group} {$inc: {n: 1}} into DB.s6_totals; S7 a POST of {"id": {"$oid": ...}, "k": group}
// to --http-url with Node's built-in fetch (undici, keep-alive).
'use strict';

const fs = require('fs');
const { MongoClient } = require('mongodb');

function vmHwmKb() {
  const m = /VmHWM:\s+(\d+)/.exec(fs.readFileSync('/proc/self/status', 'utf8'));
  return m ? parseInt(m[1], 10) : 0;
}

function parseArgs(argv) {
  const a = { resumeAfter: null, events: 0, scenario: 's2', saveEvery: 100, name: 'bench',
              latency: false, httpUrl: null };
  for (let i = 2; i < argv.length; i++) {
    const k = argv[i];
    const v = () => argv[++i];
    if (k === '--uri') a.uri = v();
    else if (k === '--db') a.db = v();
    else if (k === '--coll') a.coll = v();
    else if (k === '--resume-after') a.resumeAfter = JSON.parse(v());
    else if (k === '--events') a.events = parseInt(v(), 10);
    else if (k === '--scenario') a.scenario = v();
    else if (k === '--save-every') a.saveEvery = parseInt(v(), 10);
    else if (k === '--name') a.name = v();
    else if (k === '--latency') a.latency = true;
    else if (k === '--http-url') a.httpUrl = v();
    else throw new Error('unknown argument ' + k);
  }
  return a;
}

// ---- the scenarios' work (same as bench_docs.Work and the Lua handlers) ----
let acc = 0;
let nlen = 0;
let leaves = 0;

function isContainer(x) {
  return x !== null && typeof x === 'object' && (Array.isArray(x) || x.constructor === Object);
}

function walk(v) {
  let n = 0;
  const values = Array.isArray(v) ? v : Object.values(v);
  for (const x of values) {
    if (isContainer(x)) n += walk(x);
    else n += 1;
  }
  return n;
}

const WORK = {
  s1(change) {},
  s2(change) {
    const d = change.fullDocument;
    acc += d.seq + d.amount;
    nlen += d.customer.name.length;
  },
  s3(change) {
    leaves += walk(change.fullDocument);
  },
};

// S6/S7: handlers that return the promise of their round trip.
function ioHandler(scenario, db, url) {
  if (scenario === 's6') {
    const totals = db.collection('s6_totals');
    return (change) => totals.updateOne({ _id: change.fullDocument.group }, { $inc: { n: 1 } },
                                        { upsert: true });
  }
  const headers = { 'Content-Type': 'application/json' };
  return async (change) => {
    const d = change.fullDocument;
    const res = await fetch(url, {
      method: 'POST', headers,
      body: JSON.stringify({ id: { $oid: d._id.toHexString() }, k: d.group }),
    });
    await res.text();
    if (res.status !== 200) throw new Error('HTTP status ' + res.status);
  };
}

async function main() {
  const a = parseArgs(process.argv);
  process.on('SIGTERM', () => process.exit(0));
  const client = new MongoClient(a.uri);
  await client.connect();
  const db = client.db(a.db);
  const coll = db.collection(a.coll);
  const ckpt = db.collection('_fw_checkpoints');
  const io = a.scenario === 's6' || a.scenario === 's7';
  const handle = io ? ioHandler(a.scenario, db, a.httpUrl) : WORK[a.scenario];
  if (!handle) throw new Error('unknown scenario ' + a.scenario);
  const opts = a.resumeAfter ? { resumeAfter: a.resumeAfter } : {};
  const opened = process.hrtime.bigint(); // the aggregate goes out on the first next()
  const stream = coll.watch([], opts);
  const save = (change) => ckpt.updateOne(
    { _id: a.name },
    { $set: { lastProcessedToken: change._id, lastSeenToken: stream.resumeToken,
              updatedAt: new Date() } },
    { upsert: true });

  let n = 0;
  let since = 0;
  if (a.latency) {
    await stream.tryNext(); // opens the cursor (the aggregate) before we say ready
    process.stdout.write('ready\n');
    for await (const change of stream) {
      const d = change.fullDocument;
      process.stdout.write(d.seq + ' ' + d.t_us + '\n');
      handle(change);
      if (++since >= a.saveEvery) {
        await save(change);
        since = 0;
      }
    }
    return;
  }
  let first = 0n;
  let last = 0n;
  let change = null;
  for await (change of stream) {
    if (io) await handle(change);
    else handle(change);
    n++;
    if (++since >= a.saveEvery) {
      await save(change);
      since = 0;
    }
    if (n === 1) first = process.hrtime.bigint();
    if (n >= a.events) {
      last = process.hrtime.bigint();
      break;
    }
  }
  if (since && change) await save(change);
  process.stdout.write(JSON.stringify({
    events: n, open_ns: Number(opened), first_ns: Number(first), last_ns: Number(last),
    hwm_kb: vmHwmKb(),
    checksum: { acc, nlen, leaves },
  }) + '\n');
  await stream.close();
  await client.close();
}

main().then(() => process.exit(0), (err) => {
  console.error(err);
  process.exit(1);
});
