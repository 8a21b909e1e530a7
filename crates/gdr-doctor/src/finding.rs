// SPDX-License-Identifier: GPL-2.0
//! A finding: one reason in the verdict, how much it weighs, and its fix.

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// A check that passed; shown as context.
    Ok,
    /// Worth knowing, does not change the verdict.
    Note,
    /// GPUDirect RDMA may work, but slowly (or fail on some platforms).
    Slow,
    /// GPUDirect RDMA will not work until this is fixed.
    Fail,
}

impl Severity {
    pub fn label(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Note => "note",
            Severity::Slow => "slow",
            Severity::Fail => "FAIL",
        }
    }

    pub fn key(self) -> &'static str {
        match self {
            Severity::Ok => "ok",
            Severity::Note => "note",
            Severity::Slow => "slow",
            Severity::Fail => "fail",
        }
    }
}

#[derive(Clone, Debug)]
pub struct Finding {
    pub severity: Severity,
    /// Stable identifier for tools and tests ("iommu-translated", "acs-redirect", ...).
    pub code: &'static str,
    /// What it is about: "node", a GPU or NIC name, or "gpu0+mlx5_0".
    pub subject: String,
    pub message: String,
    pub fix: Option<String>,
}

pub(crate) fn finding(
    severity: Severity,
    code: &'static str,
    subject: &str,
    message: String,
    fix: Option<String>,
) -> Finding {
    Finding {
        severity,
        code,
        subject: subject.to_string(),
        message,
        fix,
    }
}
