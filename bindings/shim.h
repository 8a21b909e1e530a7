/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C side of peermem-rs: only what Rust cannot express. Module parameters that appear read-only
 * in /sys/module/<module>/parameters (the Rust module! macro registers parameters without sysfs
 * permissions), MODULE_VERSION and MODULE_SOFTDEP. There is no logic here.
 */
#ifndef PEERMEM_SHIM_H
#define PEERMEM_SHIM_H

/* Values of the module parameters, fixed once the module is loaded (permissions 0444). */
extern int peermem_param_persistent_api_support;
extern int peermem_param_peerdirect_support;

/* The module's version, as in MODULE_VERSION and the peer-memory client's version field. */
extern const char peermem_param_version[];

#endif /* PEERMEM_SHIM_H */
