/** A value as an SQL literal, converted as pg converts a parameter: null
 * (or undefined) is NULL, bytes are bytea's hex form, the rest text that
 * the statement's context types as it would type the parameter. */
export declare function literal(value: unknown, n: number): string;
/** text with each placeholder $N outside quotes and comments replaced by
 * values[N-1] as a literal; an Error names a placeholder without a value. */
export declare function inline(text: string, values?: readonly unknown[]): string;
