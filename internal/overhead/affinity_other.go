//go:build !linux

package overhead

import "errors"

const affinitySupported = false

func pinTasks(pid, cpu int) error { return errors.ErrUnsupported }

func pinSelf(cpu int) (func(), error) { return nil, errors.ErrUnsupported }
