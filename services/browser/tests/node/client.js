// Opens a session on the farm, clicks a button, closes it; prints one JSON line with what it saw.
// Usage: node client.js <farm address> <start url> <protos dir>
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const [address, startUrl, protosDir] = process.argv.slice(2);
const def = protoLoader.loadSync(path.join(protosDir, 'webenv/v1/environment.proto'), {
  includeDirs: [protosDir], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const webenv = grpc.loadPackageDefinition(def).webenv.v1;
const env = new webenv.EnvironmentService(address, grpc.credentials.createInsecure());
const deadline = () => new Date(Date.now() + 60000);
const call = (method, req) => new Promise((resolve, reject) =>
  env[method](req, {deadline: deadline()}, (err, res) => (err ? reject(err) : resolve(res))));

(async () => {
  const opened = await call('OpenSession', {start_url: startUrl,
    observation_spec: {formats: ['OBSERVATION_FORMAT_AXTREE']}});
  const sid = opened.session.session_id;
  const step = await call('Step', {session_id: sid, step_index: 0,
    action: {click: {target: {selector: '#btn'}}}});
  let badCode = null;
  try { await call('Step', {session_id: sid, step_index: 1, action: {}}); } catch (e) { badCode = e.code; }
  const closed = await call('CloseSession', {session_id: sid});
  console.log(JSON.stringify({session_id: sid, first_axtree: opened.observation.axtree,
    step_axtree: step.observation.axtree, bad_code: badCode, closed_state: closed.session.state}));
})().catch((e) => { console.error(e); process.exit(1); });
