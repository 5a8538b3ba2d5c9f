package protocol

import (
	"errors"
	"fmt"
)

// The one rule for stage names, for every place that takes one: a
// [stage-NAME] section of pepsi.conf, a status line's next:STAGE and
// STAGE=SECONDS, pepsi enqueue --stage, the stage flags of pepsi queue and
// pkg/worker's outcomes, so that every configured stage can be named on a
// status line. The SQL functions (pepsi.enqueue, pepsi.advance) apply the
// same rule in pepsi.stage_ok (sql/functions/10_check_stage.sql).

// maxStage is the longest stage name, in bytes.
const maxStage = 63

var errStageChars = errors.New("want letters, digits, '_', '-' or '.'")

// CheckStage says what is wrong with name as a stage name, or returns nil
// for a good one: 1 to 63 bytes, each a letter, a digit, '_', '-' or '.'.
func CheckStage(name string) error {
	if !stageChars(name) {
		return errStageChars
	}
	if len(name) > maxStage {
		return fmt.Errorf("want at most %d bytes, not %d", maxStage, len(name))
	}
	return nil
}

// validStage is CheckStage(name) == nil, for the status-line parser's bytes.
func validStage[T string | []byte](name T) bool {
	return len(name) <= maxStage && stageChars(name)
}

// stageChars reports whether name is not empty and every byte of it is one
// a stage name may have.
func stageChars[T string | []byte](name T) bool {
	if len(name) == 0 {
		return false
	}
	for i := 0; i < len(name); i++ {
		switch c := name[i]; {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '_', c == '-', c == '.':
		default:
			return false
		}
	}
	return true
}
