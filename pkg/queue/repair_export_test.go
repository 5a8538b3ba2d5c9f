package queue

// Test-only access for repair_test.go (package queue_test).

// TakeSharedSQL takes the single-dispatcher lock shared for a transaction.
const TakeSharedSQL = takeSharedSQL

// DispatcherLock is the single-dispatcher lock key.
const DispatcherLock = int64(dispatcherLock)
