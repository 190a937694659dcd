// Package charts holds the Helm chart (charts/portico) and the tests that
// hold it to deploy/: the same objects for the same settings, in every
// mode.
package charts
