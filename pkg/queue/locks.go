package queue

import "fmt"

// Every advisory-lock key pepsi takes, in one place. Two keys that are
// equal are one lock: the test in locks_test.go keeps them apart. The
// exported ones are those pkg/admin's statements pass too (to read
// pg_locks, or to take a lock shared as a repair does).
//
// The bigint form (objsubid 1 in pg_locks) and the two-int form (objsubid
// 2) never meet, so a class of the two-int form may share its bits with a
// bigint key; within a form every key differs.
const (
	// DispatcherLock makes a dispatcher without a stage set the only one:
	// taken exclusive by it, shared by a dispatcher with a set (and by a
	// repair, for its transaction).
	DispatcherLock = 0x7065707369_00 // "pepsi" + 0 (bigint form)

	// janitorLock is held by the one dispatcher that does the work that is
	// not per stage (retention, vacuum, writing settings).
	janitorLock = 0x7065707369_01 // "pepsi" + 1 (bigint form)

	// migrationLock serializes `pepsi migrate` runs. It is not held by a
	// running dispatcher, so a migration never waits for one to exit.
	migrationLock = 0x7065707369_02 // "pepsi" + 2 (bigint form)

	// StandbyLock is held shared by a standby of every stage while it
	// waits for DispatcherLock: how others see it waiting (it polls, so
	// pg_locks shows no lock waited for).
	StandbyLock = 0x7065707369_03 // "pepsi" + 3 (bigint form)

	// StandbyLockClass is the first key of the lock a standby of a stage
	// holds shared while it waits for that stage's lock; the second is
	// hashtext(stage).
	StandbyLockClass = 0x70657062 // "pepb" (two-int form)

	// StageLockClass is the first key of a stage's owner lock; the second
	// is hashtext(stage). pkg/admin's freeStage (repair.go) spells it in
	// decimal.
	StageLockClass = 0x70657073 // "peps" (two-int form)

	// fenceLockClass is the first key of a stage's fence lock (pepsi.fence,
	// a stage's takeover); sql/006_stage_sets.sql spells it in decimal.
	fenceLockClass = 0x70657066 // "pepf" (two-int form)
)

// ObjIDMask masks a key's low half as pg_locks.objid shows it (unsigned).
const ObjIDMask = int64(1<<32 - 1)

// A dispatcher's token lock (NewToken) is random with "pe" in its top 16
// bits, where every bigint key above has 0; the session check's probe key
// is random over 63 bits and checked free before use.

// Lock kinds, as LockKind names them.
const (
	LockDispatcher = "database-wide" // DispatcherLock: exclusive by a dispatcher of every stage, shared by one of a set
	LockJanitor    = "janitor"       // janitorLock
	LockMigration  = "migration"     // migrationLock: pepsi migrate
	LockStage      = "stage"         // a stage's owner lock
	LockFence      = "fence"         // a stage's fence lock (a takeover)
	LockStandby    = "standby"       // a --standby waiting for a stage (or the database-wide lock)
	LockToken      = "token"         // a dispatcher's token lock (NewToken)
	LockOther      = "other"         // not pepsi's: an application's own
)

// LockKind names an advisory lock of pg_locks by its key (objsubid,
// classid, objid) and spells the key: "N" (bigint form) or "N,M" (two-int
// form).
func LockKind(subid int16, class, obj int64) (kind, key string) {
	if subid == 2 {
		key = fmt.Sprintf("%d,%d", int32(class), int32(obj))
		switch class {
		case StageLockClass:
			return LockStage, key
		case fenceLockClass:
			return LockFence, key
		case StandbyLockClass:
			return LockStandby, key
		}
		return LockOther, key
	}
	k := class<<32 | obj
	key = fmt.Sprint(k)
	switch {
	case k == DispatcherLock:
		return LockDispatcher, key
	case k == janitorLock:
		return LockJanitor, key
	case k == migrationLock:
		return LockMigration, key
	case k == StandbyLock:
		return LockStandby, key
	case k>>48 == 0x7065:
		return LockToken, key
	}
	return LockOther, key
}
