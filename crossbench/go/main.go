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
	"fmt"
	"os"
	"runtime"
	"time"
)

type request struct {
	Op         string `json:"op"`
	ID         string `json:"id"`
	Pem        string `json:"pem"`
	Key        string `json:"key"`
	Msg        string `json:"msg"`
	Ct         string `json:"ct"`
	Sig        string `json:"sig"`
	What       string `json:"what"`
	Bits       int    `json:"bits"`
	MsgLen     int    `json:"msg_len"`
	Iterations int    `json:"iterations"`
	Reps       int    `json:"reps"`
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

func bench(keys map[string]*rsa.PrivateKey, r request) ([]float64, error) {
	if r.What == "keygen" {
		return timed(func() error { _, err := rsa.GenerateKey(rand.Reader, r.Bits); return err }, r.Iterations, r.Reps)
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
		return timed(func() error { _, err := rsa.EncryptOAEP(h, rand.Reader, &k.PublicKey, msg, nil); return err }, r.Iterations, r.Reps)
	case "decrypt":
		ct, err := rsa.EncryptOAEP(h, rand.Reader, &k.PublicKey, msg, nil)
		if err != nil {
			return nil, err
		}
		return timed(func() error { _, err := rsa.DecryptOAEP(h, rand.Reader, k, ct, nil); return err }, r.Iterations, r.Reps)
	case "sign":
		return timed(func() error { _, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest(msg), pss); return err }, r.Iterations, r.Reps)
	case "verify":
		sig, err := rsa.SignPSS(rand.Reader, k, crypto.SHA256, digest(msg), pss)
		if err != nil {
			return nil, err
		}
		return timed(func() error { return rsa.VerifyPSS(&k.PublicKey, crypto.SHA256, digest(msg), sig, pss) }, r.Iterations, r.Reps)
	}
	return nil, fmt.Errorf("unknown bench operation %q", r.What)
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
		return map[string]any{"name": "go-crypto-rsa", "version": runtime.Version(), "language": "go"}, nil
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
	case "bench":
		ns, err := bench(keys, r)
		return map[string]any{"ns": ns}, err
	}
	return nil, fmt.Errorf("unknown op %q", r.Op)
}

func main() {
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
