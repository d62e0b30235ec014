// Pushes lines to a Loki push endpoint with winston-loki (protobuf + snappy, the library's default), as a
// Node service logging to Loki would. Input on stdin: {"url", "basicAuth", "labels", "entries": [{"ts", "line",
// "labels"}], "json": false}. Prints {"sent": N, "errors": [...]} when every batch was answered.
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const winston = require("winston");
const LokiTransport = require("winston-loki");

const chunks = [];
for await (const chunk of process.stdin) chunks.push(chunk);
const input = JSON.parse(Buffer.concat(chunks).toString("utf8"));
const errors = [];
const transport = new LokiTransport({
  host: input.url,
  basicAuth: input.basicAuth,
  labels: input.labels,
  json: input.json === true,
  batching: true,
  interval: 0.2,
  timeout: 10000,
  replaceTimestamp: false,
  gracefulShutdown: false,
  format: winston.format.printf((info) => info.message),
  onConnectionError: (err) => errors.push(String(err && err.message ? err.message : err)),
});
const logger = winston.createLogger({ level: "debug", transports: [transport] });
for (const entry of input.entries) {
  logger.info({ message: entry.line, timestamp: entry.ts, labels: entry.labels || {} });
}
await transport.flush();
await new Promise((resolve) => setTimeout(resolve, 300));
console.log(JSON.stringify({ sent: input.entries.length, errors, json: input.json === true }));
process.exit(0);
