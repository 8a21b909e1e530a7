#!/bin/sh
# SPDX-License-Identifier: GPL-2.0
# The conformance scenarios on the peer-memory host of kernels before 6.6, which has memory_peers
# (sysfs=1), where it shows more than the host of current kernels does; see conformance.sh.
exec "$(dirname "$0")/conformance.sh" --memory-peers
