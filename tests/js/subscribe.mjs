// Subscribes with the reference graphql-ws client and prints one JSON line per event.
// usage: node subscribe.mjs <ws-url> <operation.graphql> <variables-json> <count> [token]
// Prints {"ready":true} once the server acknowledged the connection, then {"next": <payload>} lines,
// {"error": ...} on failure, and {"closed": {code, reason}} when the server closes the socket.
import { readFileSync } from "node:fs";
import { createClient } from "graphql-ws";
import WebSocket from "ws";

const [url, operationFile, variablesJson, countText, token] = process.argv.slice(2);
const query = readFileSync(operationFile, "utf8");
const wanted = Number(countText);
const print = (value) => process.stdout.write(JSON.stringify(value) + "\n");

const client = createClient({
  url,
  webSocketImpl: WebSocket,
  lazy: false,
  retryAttempts: 0,
  connectionParams: token ? { Authorization: `Bearer ${token}` } : {},
  on: {
    connected: () => print({ ready: true }),
    closed: (event) => print({ closed: { code: event.code, reason: event.reason } }),
  },
});

let seen = 0;
const finish = async (code) => {
  await client.dispose();
  process.exit(code);
};

client.subscribe(
  { query, variables: JSON.parse(variablesJson) },
  {
    next: (payload) => {
      print({ next: payload });
      seen += 1;
      if (seen >= wanted) finish(0);
    },
    error: (error) => {
      print({ error: error instanceof Error ? error.message : error });
      finish(1);
    },
    complete: () => finish(seen >= wanted ? 0 : 1),
  },
);
setTimeout(() => { print({ error: "timeout" }); finish(2); }, 60000);
