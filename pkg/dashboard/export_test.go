package dashboard

import (
	"time"

	"github.com/pepsi-dev/pepsi/pkg/queue"
)

// AddSample records statistics as if the server had sampled them at at:
// the browser test's overview shows minutes of history without waiting
// for them.
func (d *Dashboard) AddSample(at time.Time, stages []queue.StageStats) { d.samples.add(at, stages) }
