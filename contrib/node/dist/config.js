"use strict";
// The -c CONFIG argument and the database to connect to (pepsi.conf(5)).
Object.defineProperty(exports, "__esModule", { value: true });
exports.ConfigError = exports.DEFAULT_PATH = void 0;
exports.configArg = configArg;
exports.iniDsn = iniDsn;
exports.resolveDsn = resolveDsn;
exports.parseKeywords = parseKeywords;
exports.defaultUser = defaultUser;
exports.connectionString = connectionString;
const node_fs_1 = require("node:fs");
const node_os_1 = require("node:os");
/** The configuration file when neither -c nor PEPSI_CONFIG names one. */
exports.DEFAULT_PATH = "/etc/pepsi/pepsi.conf";
/** A usage or configuration error: the program exits 2. */
class ConfigError extends Error {
    name = "ConfigError";
}
exports.ConfigError = ConfigError;
/** The file of -c FILE (or -cFILE, -c=FILE, --c FILE, --c=FILE) in argv,
 * "" if none; the other arguments are the stage's own. */
function configArg(argv) {
    let file = "";
    for (let i = 0; i < argv.length; i++) {
        const a = argv[i];
        if (a === "--") {
            break;
        }
        if (a === "-c" || a === "--c") {
            if (i + 1 >= argv.length) {
                throw new ConfigError(`flag needs an argument: ${a}`);
            }
            file = argv[++i];
        }
        else if (a.startsWith("-c=") || a.startsWith("--c=")) {
            file = a.slice(a.indexOf("=") + 1);
        }
        else if (a.startsWith("-c") && !a.startsWith("--")) {
            file = a.slice(2);
        }
    }
    return file;
}
/** A value as written after the =: an inline comment (a # or ; after a
 * blank) cut, and the quotes of a wholly quoted value removed. */
function iniValue(raw) {
    const v = raw.trim();
    if (v.length >= 2 && (v[0] === '"' || v[0] === "'") && v[v.length - 1] === v[0]) {
        return v.slice(1, -1);
    }
    for (let i = 1; i < v.length; i++) {
        if ((v[i] === "#" || v[i] === ";") && (v[i - 1] === " " || v[i - 1] === "\t")) {
            return v.slice(0, i).trim();
        }
    }
    return v;
}
/** [database] DSN of the pepsi.conf text ("" if it has none). A minimal
 * reader: the dispatcher has checked the file already. */
function iniDsn(text) {
    let section = "";
    for (const line of text.split(/\r?\n/)) {
        const s = line.trim();
        if (s === "" || s[0] === "#" || s[0] === ";") {
            continue;
        }
        if (s.startsWith("[") && s.endsWith("]")) {
            section = s.slice(1, -1).trim();
            continue;
        }
        const eq = s.indexOf("=");
        if (eq > 0 && section === "database" && s.slice(0, eq).trim() === "DSN") {
            return iniValue(s.slice(eq + 1));
        }
    }
    return "";
}
/** The database to connect to: $PEPSI_DSN (which the dispatcher sets),
 * else [database] DSN of the file named by -c, $PEPSI_CONFIG or the
 * default path, as the pepsi commands resolve it. ConfigError if none. */
function resolveDsn(configFile, env = process.env) {
    const dsn = env.PEPSI_DSN ?? "";
    if (dsn !== "") {
        return dsn;
    }
    const path = configFile || env.PEPSI_CONFIG || exports.DEFAULT_PATH;
    let text;
    try {
        text = (0, node_fs_1.readFileSync)(path, "utf8");
    }
    catch (e) {
        const why = e.code ?? String(e);
        throw new ConfigError(`${path}: ${why} (name a file with -c or PEPSI_CONFIG, or set PEPSI_DSN)`);
    }
    const found = iniDsn(text);
    if (found === "") {
        throw new ConfigError(`${path}: no database: set [database] DSN in ${path} or PEPSI_DSN`);
    }
    return found;
}
// The keywords of a libpq keyword/value DSN that pg's connection string
// takes as they are (pg-connection-string reads them from a URL's query).
const PASSED = new Set([
    "host",
    "port",
    "dbname",
    "user",
    "password",
    "application_name",
    "fallback_application_name",
    "sslmode",
    "sslcert",
    "sslkey",
    "sslrootcert",
    "options",
    "connect_timeout",
    "keepalives",
    "keepalives_idle",
    "client_encoding",
]);
/** The words of a libpq keyword/value DSN ("host=/run dbname=x
 * password='a b'"), as a map; ConfigError naming what is wrong. */
function parseKeywords(dsn) {
    const out = new Map();
    let i = 0;
    const n = dsn.length;
    const blank = (c) => c === " " || c === "\t" || c === "\n" || c === "\r";
    while (i < n) {
        while (i < n && blank(dsn[i]))
            i++;
        if (i >= n)
            break;
        const start = i;
        while (i < n && dsn[i] !== "=" && !blank(dsn[i]))
            i++;
        const key = dsn.slice(start, i);
        while (i < n && blank(dsn[i]))
            i++;
        if (dsn[i] !== "=" || key === "") {
            throw new ConfigError(`DSN: missing "=" after ${quoteWord(key)}`);
        }
        i++;
        while (i < n && blank(dsn[i]))
            i++;
        let value = "";
        if (dsn[i] === "'") {
            i++;
            for (;;) {
                if (i >= n)
                    throw new ConfigError(`DSN: unterminated quoted value of ${key}`);
                const c = dsn[i++];
                if (c === "'")
                    break;
                if (c === "\\" && i < n) {
                    value += dsn[i++];
                }
                else {
                    value += c;
                }
            }
        }
        else {
            while (i < n && !blank(dsn[i])) {
                const c = dsn[i++];
                if (c === "\\" && i < n) {
                    value += dsn[i++];
                }
                else {
                    value += c;
                }
            }
        }
        out.set(key, value);
    }
    return out;
}
function quoteWord(w) {
    return JSON.stringify(w);
}
/** The user libpq logs in as when neither the DSN nor $PGUSER names one:
 * the operating system's (pg would take $USER, which may be unset). null
 * when $PGUSER names one, which pg takes itself. */
function defaultUser(env = process.env) {
    if (env.PGUSER) {
        return null;
    }
    try {
        return (0, node_os_1.userInfo)().username;
    }
    catch {
        return null;
    }
}
/** A DSN as a connection string pg takes: a URL (postgres://…) as it is, a
 * libpq keyword/value DSN turned into one; with user (defaultUser) when it
 * names none. ConfigError for a keyword pg cannot honour. */
function connectionString(dsn, user = defaultUser()) {
    const d = dsn.trim();
    let url;
    if (/^postgres(ql)?:\/\//.test(d)) {
        url = d;
    }
    else {
        const kw = parseKeywords(d);
        const q = new URLSearchParams();
        for (const [k, v] of kw) {
            if (!PASSED.has(k)) {
                throw new ConfigError(`DSN: keyword ${k} is not supported by the Node kit (pg); use a postgres:// URL or leave it out`);
            }
            if (k !== "dbname") {
                q.set(k, v);
            }
        }
        const query = q.toString();
        url = `postgresql:///${encodeURIComponent(kw.get("dbname") ?? "")}${query ? "?" + query : ""}`;
    }
    if (user === null) {
        return url;
    }
    let u;
    try {
        u = new URL(url);
    }
    catch {
        throw new ConfigError("DSN: not a valid postgres:// URL");
    }
    if (u.username !== "" || u.searchParams.has("user")) {
        return url;
    }
    return url + (url.includes("?") ? "&" : "?") + "user=" + encodeURIComponent(user);
}
