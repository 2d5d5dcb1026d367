// Opens a session on the farm, clicks a button twice without step_index, retries the second click by its index,
// closes it; prints one JSON line with what it saw.
// Usage: node client.js <farm address> <start url> <protos dir>
const path = require('path');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');
const protobuf = require('protobufjs');

const [address, startUrl, protosDir] = process.argv.slice(2);
const def = protoLoader.loadSync(path.join(protosDir, 'webenv/v1/environment.proto'), {
  includeDirs: [protosDir], keepCase: true, longs: String, enums: String, defaults: true, oneofs: true,
});
const webenv = grpc.loadPackageDefinition(def).webenv.v1;
// the error model, from googleapis' protos that protos/ ships: google.rpc.Status in the grpc-status-details-bin trailer
const rpc = new protobuf.Root().loadSync([path.join(protosDir, 'google/rpc/status.proto'),
  path.join(protosDir, 'google/rpc/error_details.proto')], {keepCase: true});
const errorInfo = (err) => {
  const status = rpc.lookupType('google.rpc.Status').decode(err.metadata.get('grpc-status-details-bin')[0]);
  const any = status.details.find((d) => d.type_url.endsWith('/google.rpc.ErrorInfo'));
  return rpc.lookupType('google.rpc.ErrorInfo').decode(any.value);
};
const env = new webenv.EnvironmentService(address, grpc.credentials.createInsecure());
const deadline = () => new Date(Date.now() + 60000);
const call = (method, req) => new Promise((resolve, reject) =>
  env[method](req, {deadline: deadline()}, (err, res) => (err ? reject(err) : resolve(res))));

(async () => {
  const opened = await call('OpenSession', {start_url: startUrl,
    observation_spec: {formats: ['OBSERVATION_FORMAT_AXTREE']}});
  const sid = opened.session.session_id;
  // step_index left unset, as a client that does not know it would: every step acts, the same action too
  const click = {click: {target: {selector: '#btn'}}};
  const step = await call('Step', {session_id: sid, action: click});
  const again = await call('Step', {session_id: sid, action: click});
  // a retry sends the index of the step it repeats: answered from cache, not clicked a third time
  const retry = await call('Step', {session_id: sid, step_index: again.step_index, action: click});
  let badCode = null, badInfo = null;
  try { await call('Step', {session_id: sid, action: {}}); } catch (e) { badCode = e.code; badInfo = errorInfo(e); }
  const closed = await call('CloseSession', {session_id: sid});
  console.log(JSON.stringify({session_id: sid, first_axtree: opened.observation.axtree,
    step_axtree: step.observation.axtree, again_axtree: again.observation.axtree,
    step_indexes: [step.step_index, again.step_index, retry.step_index], retry_axtree: retry.observation.axtree,
    bad_code: badCode, bad_reason: badInfo && badInfo.reason, bad_field: badInfo && badInfo.metadata.field,
    closed_state: closed.session.state, step_count: closed.session.step_count}));
})().catch((e) => { console.error(e); process.exit(1); });
