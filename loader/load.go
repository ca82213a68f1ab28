package loader

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
)

// verifierTail is how many lines of the verifier log an error shows: the
// end of the log is where the verifier says what it rejected and the few
// instructions that led there.
const verifierTail = 12

// Load loads spec into obj like ebpf.CollectionSpec.LoadAndAssign. If the
// verifier rejects a program, the error wraps ErrVerifier (and the
// *ebpf.VerifierError, whose Log holds all of it) and shows the end of the
// log.
func Load(spec *ebpf.CollectionSpec, obj any, opts *ebpf.CollectionOptions) error {
	if err := spec.LoadAndAssign(obj, opts); err != nil {
		return explainVerifier(fmt.Errorf("load BPF objects: %w", err))
	}
	return nil
}

// explainVerifier turns an error carrying an *ebpf.VerifierError into one
// wrapping ErrVerifier that shows the end of the verifier log; other
// errors are returned unchanged.
func explainVerifier(err error) error {
	var ve *ebpf.VerifierError
	if err == nil || !errors.As(err, &ve) {
		return err
	}
	return &verifierError{err: err, ve: ve}
}

type verifierError struct {
	err error // the whole chain, ending in ve
	ve  *ebpf.VerifierError
}

func (e *verifierError) Unwrap() []error { return []error{ErrVerifier, e.err} }

func (e *verifierError) Error() string {
	// The chain's text ends with ve's one-line summary: keep the context
	// before it and the cause, then the tail of the log.
	head := strings.TrimSuffix(e.err.Error(), e.ve.Error())
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s%v", ErrVerifier, head, e.ve.Cause)
	log := e.ve.Log
	// The last line is usually "processed N insns ...": statistics.
	for len(log) > 0 && (strings.HasPrefix(log[len(log)-1], "processed ") || strings.TrimSpace(log[len(log)-1]) == "") {
		log = log[:len(log)-1]
	}
	if len(log) == 0 {
		b.WriteString(" (no verifier log)")
		return b.String()
	}
	from := max(0, len(log)-verifierTail)
	if from > 0 {
		fmt.Fprintf(&b, "\nverifier log, last %d of %d lines (the whole log is in the *ebpf.VerifierError):", len(log)-from, len(e.ve.Log))
	} else {
		b.WriteString("\nverifier log:")
	}
	for _, l := range log[from:] {
		b.WriteString("\n  ")
		b.WriteString(l)
	}
	return b.String()
}
