package testdb

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/mongolock/mongolock/internal/syncbuf"
)

// startContainer starts a MongoDB single-node replica set in Docker with
// the program in ./container, a module of its own (testcontainers-go stays
// out of mongolock's go.mod), and returns its URI and a function that
// removes the container. The program removes it when its stdin closes:
// when stop closes it, or when this process dies.
func startContainer() (string, func(), error) {
	dir, err := sourceDir()
	if err != nil {
		return "", nil, err
	}
	cmd := exec.Command("go", "run", ".")
	cmd.Dir = filepath.Join(dir, "container")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return "", nil, err
	}
	line := &firstLine{got: make(chan string, 1)}
	var stderr syncbuf.Buffer
	cmd.Stdout, cmd.Stderr = line, &stderr
	// The program's output ends with it, not with grandchildren it leaves.
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		return "", nil, fmt.Errorf("go run %s: %w", cmd.Dir, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	stop := func() {
		_ = stdin.Close()
		select {
		case <-exited:
		case <-time.After(2 * time.Minute):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	// The first run compiles the program and may pull the image.
	select {
	case uri := <-line.got:
		return uri, stop, nil
	case err := <-exited:
		return "", nil, fmt.Errorf("go run %s: %v: %s", cmd.Dir, err, strings.TrimSpace(stderr.String()))
	case <-time.After(10 * time.Minute):
		stop()
		return "", nil, fmt.Errorf("go run %s: no URI within 10 minutes: %s", cmd.Dir, strings.TrimSpace(stderr.String()))
	}
}

// firstLine is a writer that sends the first line written to it on got,
// and discards the rest.
type firstLine struct {
	mu   sync.Mutex
	buf  []byte
	sent bool
	got  chan string
}

func (w *firstLine) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.sent {
		w.buf = append(w.buf, p...)
		if i := bytes.IndexByte(w.buf, '\n'); i >= 0 {
			w.sent = true
			w.got <- strings.TrimSpace(string(w.buf[:i]))
		}
	}
	return len(p), nil
}
