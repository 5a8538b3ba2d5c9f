package admin

// Test-only access to unexported parts for the external test package
// (admin_test), which needs pkg/pgtest.

// TakeSharedSQL takes the single-dispatcher lock shared for a transaction.
const TakeSharedSQL = takeSharedSQL

// TextPayloadRE is the test of a text payload, for the test of it.
var TextPayloadRE = textPayloadRE

// ReasonSQL is a failed message's reason as a failure group sees it.
const ReasonSQL = reasonSQL
