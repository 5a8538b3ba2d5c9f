package queue

// ResumeSQL is the resume of due paused rows, for plan tests.
const ResumeSQL = resumeSQL
