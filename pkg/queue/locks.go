package queue

// Every advisory-lock key pepsi takes, in one place. Two keys that are
// equal are one lock: the test in locks_test.go keeps them apart.
//
// The bigint form (objsubid 1 in pg_locks) and the two-int form (objsubid
// 2) never meet, so a class of the two-int form may share its bits with a
// bigint key; within a form every key differs.
const (
	// dispatcherLock makes a dispatcher without a stage set the only one:
	// taken exclusive by it, shared by a dispatcher with a set.
	dispatcherLock = 0x7065707369_00 // "pepsi" + 0 (bigint form)

	// janitorLock is held by the one dispatcher that does the work that is
	// not per stage (retention, vacuum, writing settings).
	janitorLock = 0x7065707369_01 // "pepsi" + 1 (bigint form)

	// migrationLock serializes `pepsi migrate` runs. It is not held by a
	// running dispatcher, so a migration never waits for one to exit.
	migrationLock = 0x7065707369_02 // "pepsi" + 2 (bigint form)

	// standbyLock is held shared by a standby of every stage while it
	// waits for dispatcherLock: how others see it waiting (it polls, so
	// pg_locks shows no lock waited for).
	standbyLock = 0x7065707369_03 // "pepsi" + 3 (bigint form)

	// standbyLockClass is the first key of the lock a standby of a stage
	// holds shared while it waits for that stage's lock; the second is
	// hashtext(stage).
	standbyLockClass = 0x70657062 // "pepb" (two-int form)

	// stageLockClass is the first key of a stage's owner lock; the second
	// is hashtext(stage). repair.go's freeStage spells it in decimal.
	stageLockClass = 0x70657073 // "peps" (two-int form)

	// fenceLockClass is the first key of a stage's fence lock (pepsi.fence,
	// a stage's takeover); sql/006_stage_sets.sql spells it in decimal.
	fenceLockClass = 0x70657066 // "pepf" (two-int form)
)

// objid32 masks pg_locks.objid, which shows the key's low half unsigned.
const objid32 = int64(1<<32 - 1)

// A dispatcher's token lock (NewToken) is random with "pe" in its top 16
// bits, where every bigint key above has 0; the session check's probe key
// is random over 63 bits and checked free before use.
