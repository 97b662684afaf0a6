//! CUDA toolkit ↔ driver compatibility, from NVIDIA's CUDA Toolkit release notes (Tables 2 and 3,
//! as published for CUDA 13.2 Update 2: docs.nvidia.com/cuda/cuda-toolkit-release-notes).
//!
//! Two questions are answered: does the installed driver support the CUDA version a framework was
//! built for at all (minimum driver of that major family, "minor-version compatibility"), and does
//! it meet the toolkit's own driver (full feature set)?

use serde::{Deserialize, Serialize};

/// A driver version such as `580.159.04`, compared numerically field by field.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct DriverVersion(pub Vec<u32>);

impl DriverVersion {
    /// Parses `580.159.04` or `570.26`; `None` when it is not a dotted number.
    pub fn parse(text: &str) -> Option<Self> {
        let parts: Option<Vec<u32>> = text.trim().split('.').map(|p| p.parse().ok()).collect();
        parts
            .filter(|p| !p.is_empty() && p.len() <= 4)
            .map(DriverVersion)
    }

    /// The first component (`580` of `580.159.04`), which decides what CUDA the driver supports;
    /// 0 when the version has no components.
    pub fn major(&self) -> u32 {
        self.0.first().copied().unwrap_or(0)
    }
}

impl std::fmt::Display for DriverVersion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let text: Vec<String> = self.0.iter().map(|p| format!("{p:02}")).collect();
        // The first field is never zero-padded.
        let first = self.0.first().map(|p| p.to_string()).unwrap_or_default();
        let rest = text.iter().skip(1).cloned().collect::<Vec<_>>();
        if rest.is_empty() {
            write!(f, "{first}")
        } else {
            write!(f, "{first}.{}", rest.join("."))
        }
    }
}

/// Table 2: minimum driver branch per CUDA major family for minor-version compatibility.
pub const MIN_DRIVER_MAJOR_FOR_FAMILY: &[(u32, u32)] = &[(13, 580), (12, 525), (11, 450)];

/// Table 3 (Linux x86_64): the driver each toolkit release shipped with, newest first per family.
/// `(cuda major, cuda minor, release name, minimum Linux driver)`.
pub const TOOLKIT_DRIVERS: &[(u32, u32, &str, &str)] = &[
    (13, 2, "13.2 GA", "595.45.04"),
    (13, 1, "13.1 GA", "590.44.01"),
    (13, 0, "13.0 GA", "580.65.06"),
    (12, 9, "12.9 GA", "575.51.03"),
    (12, 8, "12.8 GA", "570.26"),
    (12, 6, "12.6 GA", "560.28.03"),
    (12, 5, "12.5 GA", "555.42.02"),
    (12, 4, "12.4 GA", "550.54.14"),
    (12, 3, "12.3 GA", "545.23.06"),
    (12, 2, "12.2 GA", "535.54.03"),
    (12, 1, "12.1 GA", "530.30.02"),
    (12, 0, "12.0 GA", "525.60.13"),
    (11, 8, "11.8 GA", "520.61.05"),
    (11, 7, "11.7 GA", "515.43.04"),
    (11, 6, "11.6 GA", "510.39.01"),
    (11, 5, "11.5 GA", "495.29.05"),
    (11, 4, "11.4.0 GA", "470.42.01"),
    (11, 3, "11.3 GA", "465.19.01"),
    (11, 2, "11.2.0 GA", "460.27.03"),
    (11, 1, "11.1 GA", "455.23"),
    (11, 0, "11.0.2 GA", "450.51.05"),
    (10, 2, "10.2.89", "440.33"),
    (10, 1, "10.1", "418.39"),
    (10, 0, "10.0.130", "410.48"),
    (9, 2, "9.2.148", "396.37"),
];

/// The verdict of comparing a driver with the CUDA version a framework was built for.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "verdict", rename_all = "kebab-case")]
pub enum Compatibility {
    /// The driver is at least the toolkit's own driver: full feature set.
    Full,
    /// Runs through minor-version compatibility, with a limited feature set (PTX JIT of newer
    /// PTX fails, some APIs return "call requires newer driver").
    MinorVersionCompatible { toolkit_driver: String },
    /// The driver is older than the family's minimum: CUDA will not start
    /// ("CUDA driver version is insufficient for CUDA runtime version").
    TooOld { minimum_driver_branch: u32 },
    /// The CUDA version is not in the table (too new or too old to judge).
    Unknown,
}

/// Compares a driver with a CUDA version `(major, minor)`.
pub fn check(driver: &DriverVersion, cuda: (u32, u32)) -> Compatibility {
    let (major, minor) = cuda;
    let Some(&(_, family_minimum)) = MIN_DRIVER_MAJOR_FOR_FAMILY
        .iter()
        .find(|(m, _)| *m == major)
    else {
        // Families before 11 had no minor-version compatibility: the toolkit driver is the minimum.
        return match toolkit_driver(cuda) {
            Some(required) if driver >= &required => Compatibility::Full,
            Some(required) => Compatibility::TooOld {
                minimum_driver_branch: required.major(),
            },
            None => Compatibility::Unknown,
        };
    };
    if driver.major() < family_minimum {
        return Compatibility::TooOld {
            minimum_driver_branch: family_minimum,
        };
    }
    match toolkit_driver((major, minor)) {
        Some(required) if driver >= &required => Compatibility::Full,
        Some(required) => Compatibility::MinorVersionCompatible {
            toolkit_driver: required.to_string(),
        },
        None => Compatibility::Unknown,
    }
}

/// The driver a toolkit release shipped with; for a minor not in the table (e.g. 12.7, which
/// was never released), the next lower listed minor of the same family.
pub fn toolkit_driver(cuda: (u32, u32)) -> Option<DriverVersion> {
    TOOLKIT_DRIVERS
        .iter()
        .filter(|(major, minor, _, _)| *major == cuda.0 && *minor <= cuda.1)
        .max_by_key(|(_, minor, _, _)| *minor)
        .and_then(|(_, _, _, driver)| DriverVersion::parse(driver))
}

/// The CUDA version encoded as NVML/`cuDriverGetVersion` give it (`13000` → `(13, 0)`).
pub fn cuda_from_api_version(version: u32) -> (u32, u32) {
    (version / 1000, (version % 1000) / 10)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> DriverVersion {
        DriverVersion::parse(s).unwrap_or_else(|| panic!("test version {s}"))
    }

    #[test]
    fn driver_versions_compare_numerically() {
        assert!(v("580.159.04") > v("580.65.06"));
        assert!(v("570.26") < v("570.124.06"));
        assert_eq!(v("580.65.06").to_string(), "580.65.06");
        assert_eq!(DriverVersion::parse("abc"), None);
    }

    #[test]
    fn judges_driver_against_cuda_families() {
        assert_eq!(check(&v("580.159.04"), (13, 0)), Compatibility::Full);
        assert_eq!(check(&v("580.159.04"), (12, 1)), Compatibility::Full);
        assert_eq!(
            check(&v("535.104.05"), (13, 0)),
            Compatibility::TooOld {
                minimum_driver_branch: 580
            }
        );
        assert_eq!(
            check(&v("535.104.05"), (12, 4)),
            Compatibility::MinorVersionCompatible {
                toolkit_driver: "550.54.14".into()
            }
        );
        assert_eq!(
            check(&v("470.42.01"), (12, 1)),
            Compatibility::TooOld {
                minimum_driver_branch: 525
            }
        );
        assert_eq!(
            check(&v("580.65.06"), (13, 2)),
            Compatibility::MinorVersionCompatible {
                toolkit_driver: "595.45.04".into()
            }
        );
        assert_eq!(check(&v("600.1"), (14, 0)), Compatibility::Unknown);
        assert_eq!(cuda_from_api_version(12080), (12, 8));
    }
}
