/**
 * Child script for test/integration/netlink-restricted.test.ts: runs the
 * doctor's namespace probe and the uplink check, and lists interfaces the
 * way the endpoint and the proxy do, then prints the results as one JSON
 * line. Run it under test/support/noNetlink.py.
 */
import { networkInterfaces } from "node:os";
import { PREREQUISITES, REAL_DOCTOR_DEPS, runChecks } from "../../src/agent/doctor/checks.ts";
import { interfaceAddresses } from "../../src/wireguard/index.ts";

const checks = await runChecks(
  { uplink: { device: "lo" } },
  REAL_DOCTOR_DEPS,
  PREREQUISITES.filter((c) => c.id === "netns-probe" || c.id === "uplink"),
);
const errors: string[] = [];
const interfaces = interfaceAddresses(networkInterfaces, (m) => errors.push(m));
console.log(JSON.stringify({ checks, interfaces: Object.keys(interfaces), errors }));
