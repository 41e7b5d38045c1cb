/** The one workerd module the entry imports (types only; the runtime provides it). */
declare module "cloudflare:workers" {
  export class DurableObject {
    constructor(ctx: never, env: never);
  }
}
