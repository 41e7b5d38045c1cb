/**
 * The CLI's scheduler client is the public one (`beachball/client`,
 * src/client): the CLI uses it as every controller does. Re-exported here
 * so CLI modules keep one import path; configuration is resolved in
 * src/command/clientConfig.ts.
 * Must never: print the token.
 */
export { retryTransport, SchedulerClient, SchedulerUnreachableError, TRANSPORT_RETRY_MS } from "../client/index.ts";
