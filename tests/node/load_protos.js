// Loads every protos/webenv/v1/*.proto with @grpc/proto-loader and prints {service: {method: {requestStream,
// responseStream, requestType, responseType}}} as JSON, so the Python test can compare it with its own stubs.
const path = require("path");
const fs = require("fs");
const protoLoader = require("@grpc/proto-loader");
const grpc = require("@grpc/grpc-js");

const root = path.resolve(__dirname, "../../protos");
const dir = path.join(root, "webenv/v1");
const files = fs.readdirSync(dir).filter((f) => f.endsWith(".proto")).map((f) => path.join("webenv/v1", f));
const def = protoLoader.loadSync(files, { includeDirs: [root], keepCase: true, enums: String, defaults: true, oneofs: true });
const loaded = grpc.loadPackageDefinition(def);
const out = {};
for (const [name, value] of Object.entries(def)) {
  if (value && typeof value === "object" && !value.format) {
    const methods = {};
    for (const [m, d] of Object.entries(value)) {
      methods[m] = { requestStream: d.requestStream, responseStream: d.responseStream,
        requestType: d.requestType.type.name, responseType: d.responseType.type.name };
    }
    out[name] = methods;
  }
}
// A client constructor exists for every service (what generated clients in other languages use too).
for (const svc of Object.keys(out)) {
  const short = svc.split(".").pop();
  if (typeof loaded.webenv.v1[short] !== "function") throw new Error(`no client constructor for ${svc}`);
}
process.stdout.write(JSON.stringify(out));
