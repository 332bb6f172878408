#!/usr/bin/env bash
# The test environment: what scripts/setup.sh --test installs.
exec "$(dirname "$0")/setup.sh" --test
