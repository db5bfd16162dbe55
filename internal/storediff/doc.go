// Package storediff holds a differential test of the storage backends: the
// same random sequence of store calls, with the same clock, runs against
// SQLite and PostgreSQL, and every answer and the whole task table must
// agree after each call. The conformance suite (store/storetest) checks
// each rule of the contract on purpose-built cases; this test looks for
// the cases nobody thought to write, where the two backends would read the
// contract differently.
//
// The package has no code of its own, only its test.
package storediff
