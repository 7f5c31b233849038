// Command crossbench is the Go adapter of sipsec crypto-bench: crypto/rsa
// behind the line protocol of crossbench/protocol.md (RSA-OAEP with
// SHA-256, RSA-PSS with SHA-256 and a 32-byte salt).
package main

import (
	"bufio"
	"crypto"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"runtime"
	"sort"
	"testing"
	"time"
)

type request struct {
	Op         string  `json:"op"`
	ID         string  `json:"id"`
	Pem        string  `json:"pem"`
	Key        string  `json:"key"`
	Msg        string  `json:"msg"`
	Ct         string  `json:"ct"`
	Sig        string  `json:"sig"`
	What       string  `json:"what"`
	Bits       int     `json:"bits"`
	MsgLen     int     `json:"msg_len"`
	Iterations int     `json:"iterations"`
	Reps       int     `json:"reps"`
	Seconds    float64 `json:"seconds"`
}

var pss = &rsa.PSSOptions{SaltLength: 32, Hash: crypto.SHA256}

func load(p string) (*rsa.PrivateKey, error) {
	block, _ := pem.Decode([]byte(p))
	if block == nil {
		return nil, errors.New("no PEM block")
	}
	if k, err := x509.ParsePKCS8PrivateKey(block.Bytes); err == nil {
		if rk, ok := k.(*rsa.PrivateKey); ok {
			return rk, nil
		}
		return nil, errors.New("not an RSA key")
	}
	return x509.ParsePKCS1PrivateKey(block.Bytes)
}

func digest(m []byte) []byte {
	h := sha256.Sum256(m)
	return h[:]
}

// timed returns the mean nanoseconds per call of f in each repetition,
// after one warm-up repetition.
func timed(f func() error, n, reps int) ([]float64, error) {
	out := []float64{}
	for rep := 0; rep <= reps; rep++ {
		t0 := time.Now()
		for i := 0; i < n; i++ {
			if err := f(); err != nil {
				return nil, err
			}
		}
		dt := time.Since(t0)
		if rep > 0 {
			out = append(out, float64(dt.Nanoseconds())/float64(n))
		}
	}
	return out, nil
}

// prepare makes the input of one bench cell once and returns the call.
func prepare(keys map[string]*rsa.PrivateKey, r request) (func() error, error) {
	if r.What == "keygen" {
		return func() error { _, err := rsa.GenerateKey(rand.Reader, r.Bits); return err }, nil
	}
	k, ok := keys[r.Key]
	if !ok {
		return nil, fmt.Errorf("unknown key %q", r.Key)
	}
	msg := make([]byte, r.MsgLen)
	if _, err := rand.Read(msg); err != nil {
		return nil, err
	}
	h := sha256.New()
	switch r.What {
	case "encrypt":
		return func() error { _, err := rsa.EncryptOAEP(h, rand.Reader, &k.PublicKey, msg, nil); return err }, nil
	case "decrypt":
		ct, err := rsa.EncryptOAEP(h, rand.Reader, &k.PublicKey, msg, nil)
		if err != nil {
			return nil, err
		}
		return func() error { _, err := rsa.DecryptOAEP(h, rand.Reader, k, ct, nil); return err }, nil
	case "sign":
		return func() error { _, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest(msg), pss); return err }, nil
	case "verify":
		sig, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest(msg), pss)
		if err != nil {
			return nil, err
		}
		return func() error { return rsa.VerifyPSS(&k.PublicKey, crypto.SHA256, digest(msg), sig, pss) }, nil
	}
	return nil, fmt.Errorf("unknown bench operation %q", r.What)
}

// framework times one cell with Go's own benchmark machinery
// (testing.Benchmark, which picks b.N itself): reps runs of about
// r.Seconds each, summarised here as mean, sample sd and median.
func framework(f func() error, r request) (map[string]any, error) {
	secs := r.Seconds
	if secs <= 0 {
		secs = 1
	}
	if err := flag.Set("test.benchtime", time.Duration(secs*float64(time.Second)).String()); err != nil {
		return nil, err
	}
	reps := r.Reps
	if reps < 2 {
		reps = 2
	}
	var failed error
	var ns []float64
	var total int
	for i := 0; i < reps; i++ {
		res := testing.Benchmark(func(b *testing.B) {
			for j := 0; j < b.N; j++ {
				if err := f(); err != nil {
					failed = err
					b.FailNow()
				}
			}
		})
		if failed != nil {
			return nil, failed
		}
		if res.N == 0 {
			return nil, errors.New("testing.Benchmark ran nothing")
		}
		ns = append(ns, float64(res.T.Nanoseconds())/float64(res.N))
		total += res.N
	}
	mean := 0.0
	for _, x := range ns {
		mean += x
	}
	mean /= float64(len(ns))
	sd := 0.0
	for _, x := range ns {
		sd += (x - mean) * (x - mean)
	}
	sd = math.Sqrt(sd / float64(len(ns)-1))
	sorted := append([]float64(nil), ns...)
	sort.Float64s(sorted)
	median := sorted[len(sorted)/2]
	if len(sorted)%2 == 0 {
		median = (sorted[len(sorted)/2-1] + sorted[len(sorted)/2]) / 2
	}
	return map[string]any{"framework": "testing.B", "mean_ns": mean, "sd_ns": sd, "median_ns": median,
		"samples": len(ns), "iterations": total}, nil
}

func handle(keys map[string]*rsa.PrivateKey, r request) (map[string]any, error) {
	key := func() (*rsa.PrivateKey, error) {
		k, ok := keys[r.Key]
		if !ok {
			return nil, fmt.Errorf("unknown key %q", r.Key)
		}
		return k, nil
	}
	hexArg := func(s string) ([]byte, error) { return hex.DecodeString(s) }
	switch r.Op {
	case "hello":
		return map[string]any{"name": "go-crypto-rsa", "version": runtime.Version(), "language": "go",
			"variants": []string{"crt"}, "min_bits": 1024, "framework": "testing.B"}, nil
	case "load":
		k, err := load(r.Pem)
		if err != nil {
			return nil, err
		}
		keys[r.ID] = k
		return map[string]any{"bits": k.N.BitLen()}, nil
	case "encrypt", "decrypt", "sign", "verify":
		k, err := key()
		if err != nil {
			return nil, err
		}
		switch r.Op {
		case "encrypt":
			m, err := hexArg(r.Msg)
			if err != nil {
				return nil, err
			}
			ct, err := rsa.EncryptOAEP(sha256.New(), rand.Reader, &k.PublicKey, m, nil)
			return map[string]any{"ct": hex.EncodeToString(ct)}, err
		case "decrypt":
			c, err := hexArg(r.Ct)
			if err != nil {
				return nil, err
			}
			m, err := rsa.DecryptOAEP(sha256.New(), rand.Reader, k, c, nil)
			return map[string]any{"msg": hex.EncodeToString(m)}, err
		case "sign":
			m, err := hexArg(r.Msg)
			if err != nil {
				return nil, err
			}
			s, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest(m), pss)
			return map[string]any{"sig": hex.EncodeToString(s)}, err
		default:
			m, err := hexArg(r.Msg)
			if err != nil {
				return nil, err
			}
			s, err := hexArg(r.Sig)
			if err != nil {
				return nil, err
			}
			return map[string]any{"valid": rsa.VerifyPSS(&k.PublicKey, crypto.SHA256, digest(m), s, pss) == nil}, nil
		}
	case "bench", "framework":
		f, err := prepare(keys, r)
		if err != nil {
			return nil, err
		}
		if r.Op == "framework" {
			return framework(f, r)
		}
		ns, err := timed(f, r.Iterations, r.Reps)
		return map[string]any{"ns": ns}, err
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

func main() {
	testing.Init()
	keys := map[string]*rsa.PrivateKey{}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	out := bufio.NewWriter(os.Stdout)
	enc := json.NewEncoder(out)
	for in.Scan() {
		var r request
		var reply map[string]any
		err := json.Unmarshal(in.Bytes(), &r)
		if err == nil && r.Op == "quit" {
			break
		}
		if err == nil {
			reply, err = handle(keys, r)
		}
		if err != nil {
			reply = map[string]any{"ok": false, "error": err.Error()}
		} else {
			reply["ok"] = true
		}
		_ = enc.Encode(reply)
		_ = out.Flush()
	}
}
