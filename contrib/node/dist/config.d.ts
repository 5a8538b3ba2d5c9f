/** The configuration file when neither -c nor PEPSI_CONFIG names one. */
export declare const DEFAULT_PATH = "/etc/pepsi/pepsi.conf";
/** A usage or configuration error: the program exits 2. */
export declare class ConfigError extends Error {
    name: string;
}
/** The file of -c FILE (or -cFILE, -c=FILE, --c FILE, --c=FILE) in argv,
 * "" if none; the other arguments are the stage's own. */
export declare function configArg(argv: readonly string[]): string;
/** [database] DSN of the pepsi.conf text ("" if it has none). A minimal
 * reader: the dispatcher has checked the file already. */
export declare function iniDsn(text: string): string;
/** The database to connect to: $PEPSI_DSN (which the dispatcher sets),
 * else [database] DSN of the file named by -c, $PEPSI_CONFIG or the
 * default path, as the pepsi commands resolve it. ConfigError if none. */
export declare function resolveDsn(configFile: string, env?: NodeJS.ProcessEnv): string;
/** The words of a libpq keyword/value DSN ("host=/run dbname=x
 * password='a b'"), as a map; ConfigError naming what is wrong. */
export declare function parseKeywords(dsn: string): Map<string, string>;
/** The user libpq logs in as when neither the DSN nor $PGUSER names one:
 * the operating system's (pg would take $USER, which may be unset). null
 * when $PGUSER names one, which pg takes itself. */
export declare function defaultUser(env?: NodeJS.ProcessEnv): string | null;
/** A DSN as a connection string pg takes: a URL (postgres://…) as it is, a
 * libpq keyword/value DSN turned into one; with user (defaultUser) when it
 * names none. ConfigError for a keyword pg cannot honour. */
export declare function connectionString(dsn: string, user?: string | null): string;
