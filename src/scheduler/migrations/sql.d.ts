/** SQL files imported as text (Bun's `with { type: "text" }`). */
declare module "*.sql" {
  const text: string;
  export default text;
}
