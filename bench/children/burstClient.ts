/**
 * Child process of bench/burst.ts: the burst itself, in its own process so
 * the parent's health timings count the scheduler's delay, not this
 * client's own work on 2,000 sockets. Opens one raw socket per request
 * (`GET /v1/allocations/{id}/logs?follow=1&offset=0` with the controller
 * token, each to another allocation), prints `sent` once every request is
 * written, and when stdin closes prints one JSON line with how many answers
 * arrived and how many were 429, then ends (its sockets with it).
 *
 *   bun bench/children/burstClient.ts <port> <token>   (the allocation IDs: stdin's first line, a JSON array)
 */
import { connect, type Socket } from "node:net";

const port = Number(process.argv[2]);
const token = process.argv[3]!;
let answered = 0;
let shed = 0;
const sockets: Socket[] = [];
let ids: string[] | null = null;
let buffered = "";
for await (const chunk of console) {
  if (ids === null) {
    buffered += chunk;
    ids = JSON.parse(buffered) as string[];
    let written = 0;
    for (const id of ids) {
      const s = connect({ port, host: "127.0.0.1" });
      s.on("error", () => undefined);
      s.once("data", (d: Buffer) => {
        answered++;
        if (d.toString("latin1").startsWith("HTTP/1.1 429")) shed++;
      });
      s.write(
        `GET /v1/allocations/${id}/logs?follow=1&offset=0 HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer ${token}\r\n\r\n`,
        () => {
          if (++written === ids!.length) console.log("sent");
        },
      );
      sockets.push(s);
    }
  }
}
console.log(JSON.stringify({ answered, shed }));
for (const s of sockets) s.destroy();
process.exit(0);
