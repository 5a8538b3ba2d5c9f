// pg's conversion of a parameter's value, which it exports as pg/lib/utils
// and @types/pg does not declare.
declare module "pg/lib/utils" {
  /** A parameter's value as pg sends it: text, bytes, or null. */
  export function prepareValue(value: unknown): string | Buffer | null | undefined;
}
