/** `import path from "x.wasm" with { type: "file" }` gives the file's path (embedded in compiled binaries). */
declare module "*.wasm" {
  const path: string;
  export default path;
}
