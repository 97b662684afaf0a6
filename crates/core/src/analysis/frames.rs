//! Allocation stacks as people want to read them, the same in the app, the reports and the
//! command line: noise frames (the unwinder, the CPython
//! interpreter loop, the dispatcher's boxing wrappers, the allocator itself) filtered out, as
//! PyTorch's viewers do (`_frame_filter` in `torch/cuda/_memory_viz.py`, `frameFilter` in
//! `torch/utils/viz/MemoryViz.js`, github.com/pytorch/pytorch).

use crate::model::allocator::{AllocatorSnapshot, FrameId, StackId};

/// Function-name fragments of frames that say nothing about the user's code.
const NOISE_FUNCTIONS: &[&str] = &[
    "unwind::unwind",
    "CapturedTraceback::gather",
    "gather_with_cpp",
    "CUDACachingAllocator",
    "_start",
    "__libc_start_main",
    "__libc_init_first",
    "Py_BytesMain",
    "Py_RunMain",
    "_PyRun_",
    "PyRun_",
    "PyEval_",
    "_PyEval_",
    "PyObject_",
    "_PyObject_",
    "PyFunction_",
    "PyCMethod_New",
    "c10::impl::wrap_kernel_functor",
    "c10::impl::BoxedKernelWrapper",
    "c10::Dispatcher::",
];

/// File-name fragments of frames that say nothing about the user's code.
const NOISE_FILES: &[&str] = &[
    "core/boxing",
    "Register",
    "/Redispatch",
    "pythonrun.c",
    "Modules/main.c",
    "Objects/call.c",
    "Objects/methodobject.c",
    "pycore_ceval.h",
    "ceval.c",
    "cpython/abstract.h",
];

/// True for frames that the stack views hide.
pub fn is_noise_frame(name: &str, filename: &str) -> bool {
    NOISE_FUNCTIONS.iter().any(|noise| name.contains(noise))
        || NOISE_FILES.iter().any(|noise| filename.contains(noise))
}

/// One frame as the stack views and tooltips show it: `name (file:line)`, `name (file)` without
/// a line, the bare name without a file.
pub fn frame_line(name: &str, filename: &str, line: i64) -> String {
    match (filename, line) {
        ("" | "??", _) => name.to_string(),
        (file, 0) => format!("{name} ({file})"),
        (file, line) => format!("{name} ({file}:{line})"),
    }
}

/// The filtered frames of a stack as display lines, innermost first (see [`frame_line`]).
pub fn stack_lines(snapshot: &AllocatorSnapshot, stack: StackId) -> Vec<String> {
    snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&id| snapshot.frames.frame(id))
        .filter_map(|frame| {
            let name = snapshot.string(frame.name);
            let filename = snapshot.string(frame.filename);
            if is_noise_frame(name, filename) {
                return None;
            }
            Some(frame_line(name, filename, frame.line))
        })
        .collect()
}

/// True when any frame of the stack (noise included) has `needle_lower` in its file name or in
/// its line as the tooltip shows it (so `name`, `file:line` and `name (file:line)` all match);
/// `needle_lower` must already be lower case.
pub fn stack_mentions(snapshot: &AllocatorSnapshot, stack: StackId, needle_lower: &str) -> bool {
    snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&id| snapshot.frames.frame(id))
        .any(|frame| {
            let name = snapshot.string(frame.name);
            let filename = snapshot.string(frame.filename);
            filename.to_lowercase().contains(needle_lower)
                || frame_line(name, filename, frame.line)
                    .to_lowercase()
                    .contains(needle_lower)
        })
}

/// Whether a Python file is the user's code: not PyTorch's, not an installed package's, not a
/// generated `<...>` one.
fn is_library_file(filename: &str) -> bool {
    filename.contains("/torch/") || filename.contains("site-packages") || filename.starts_with('<')
}

/// The call site of an allocation whose stack was not recorded (a C++ or backward-pass
/// allocation under `--stacks python`, or a trace recorded without stacks).
pub const NO_STACK: &str = "(no stack recorded)";

/// The innermost frame of user code (a `.py` file outside torch and site-packages), as
/// `file.py:line name`; the innermost Python frame when all are library code.
pub fn user_call_site(snapshot: &AllocatorSnapshot, stack: StackId) -> String {
    let frames: Vec<_> = snapshot
        .frames
        .stack(stack)
        .iter()
        .filter_map(|&id| snapshot.frames.frame(id))
        .filter(|f| snapshot.string(f.filename).ends_with(".py"))
        .collect();
    let chosen = frames
        .iter()
        .find(|f| !is_library_file(snapshot.string(f.filename)))
        .or_else(|| frames.first());
    match chosen {
        Some(f) => {
            let file = snapshot.string(f.filename);
            let base = file.rsplit('/').next().unwrap_or(file);
            format!("{base}:{} {}", f.line, snapshot.string(f.name))
        }
        None => NO_STACK.to_owned(),
    }
}

/// The frames of user code in a stack (`.py` files outside torch and site-packages),
/// outermost first: where in the user's program an allocation was made, from the script's
/// `<module>` down to the line that allocated. Empty for a stack without any (the autograd
/// engine's thread runs the backward pass without Python frames).
pub fn user_frames(snapshot: &AllocatorSnapshot, stack: StackId) -> Vec<FrameId> {
    let mut frames: Vec<FrameId> = snapshot
        .frames
        .stack(stack)
        .iter()
        .copied()
        .filter(|&id| {
            snapshot.frames.frame(id).is_some_and(|f| {
                let file = snapshot.string(f.filename);
                file.ends_with(".py") && !is_library_file(file)
            })
        })
        .collect();
    frames.reverse();
    frames
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::allocator::Frame;

    #[test]
    fn interpreter_and_unwinder_frames_are_noise() {
        assert!(is_noise_frame("torch::unwind::unwind()", "??"));
        assert!(is_noise_frame("_PyEval_EvalFrameDefault", "??"));
        assert!(is_noise_frame(
            "at::(anonymous namespace)::wrapper_CUDA_empty",
            "RegisterCUDA_0.cpp"
        ));
        assert!(!is_noise_frame(
            "<module>",
            "/home/user/project/train_fixture.py"
        ));
        assert!(!is_noise_frame("forward", "model.py"));
    }

    #[test]
    fn stack_lines_keep_user_frames_with_locations() {
        let mut snapshot = AllocatorSnapshot::default();
        let mut frame = |name: &str, file: &str, line: i64| {
            let frame = Frame {
                name: snapshot.strings.intern(name),
                filename: snapshot.strings.intern(file),
                line,
            };
            snapshot.frames.intern_frame(frame)
        };
        let frames = [
            frame("torch::unwind::unwind()", "??", 0),
            frame("forward", "model.py", 12),
            frame("_PyEval_EvalFrameDefault", "??", 0),
            frame("at::native::empty_cuda", "??", 0),
        ];
        let stack = snapshot.frames.intern_stack(&frames);
        assert_eq!(
            stack_lines(&snapshot, stack),
            vec!["forward (model.py:12)", "at::native::empty_cuda"]
        );
        assert!(stack_mentions(&snapshot, stack, "model.py"));
        assert!(stack_mentions(&snapshot, stack, "forward"));
        assert!(!stack_mentions(&snapshot, stack, "backward"));
        // What the tooltip shows can be searched for, whole or in part.
        assert!(stack_mentions(&snapshot, stack, "model.py:12"));
        assert!(stack_mentions(&snapshot, stack, "forward (model.py:12)"));
        assert!(!stack_mentions(&snapshot, stack, "model.py:13"));
    }
}
