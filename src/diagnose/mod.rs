//! Diagnosis: findings, rules, the wizards' logic and the knowledge tables they draw on (Xid
//! codes, CUDA/driver compatibility). Pure functions over the model; nothing here touches NVML,
//! files or egui, so the same diagnosis runs live, on a reopened capture and in the web viewer.

pub mod xid;
