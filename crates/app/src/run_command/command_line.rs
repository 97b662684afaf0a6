//! The Run dialog's command line, split into words as a POSIX shell splits a simple command:
//! blanks separate words, `'…'` keeps everything as it is, `"…"` keeps everything but `\"`,
//! `\\`, `\$` and `` \` ``, a backslash outside quotes keeps the next character, and leading
//! `NAME=value` words set the job's environment (`CUDA_VISIBLE_DEVICES=1 python train.py`).
//!
//! Nothing is expanded or run by a shell, so what needs one is refused with the reason instead
//! of being passed on as something else: variables and `$(…)`, backquotes, `~`, globs, pipes,
//! redirections, command lists, background jobs, subshells and comments. Quoting such a
//! character passes it as it is; `sh -c '…'` runs a real shell.

/// What the dialog says cannot be typed unquoted, and what to do instead.
pub const NOT_SUPPORTED: &str = "Split like a shell splits words ('…', \"…\", \\ and leading \
NAME=value settings), but nothing is expanded: no $VARIABLES, ~, globs (* ?), pipes or \
redirections (| < >), command lists (; & &&), subshells or backquotes. Quote such a character \
to pass it as it is, or run a shell: sh -c '…'.";

/// A command line split into the job's environment settings and its words.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandLine {
    /// Leading `NAME=value` words, set in the job's environment.
    pub env: Vec<(String, String)>,
    /// The program and its arguments.
    pub command: Vec<String>,
}

/// A word as it was typed: its text, and how many of its first characters were unquoted (a
/// `NAME=` is a setting only when unquoted, as in a shell).
#[derive(Default)]
struct Word {
    text: String,
    plain_chars: Option<usize>,
}

impl Word {
    /// The next characters are quoted or escaped.
    fn quoting(&mut self) {
        if self.plain_chars.is_none() {
            self.plain_chars = Some(self.text.chars().count());
        }
    }

    /// `(NAME, value)` when the word is an unquoted `NAME=value`.
    fn assignment(&self) -> Option<(String, String)> {
        let (name, value) = self.text.split_once('=')?;
        let plain = self.plain_chars.unwrap_or(usize::MAX);
        let valid = name.chars().count() < plain
            && name
                .chars()
                .next()
                .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        valid.then(|| (name.to_owned(), value.to_owned()))
    }
}

/// Why `c`, typed unquoted at character `at` (counted from 1), is refused.
fn unsupported(c: char, at: usize) -> String {
    let what = match c {
        '$' => "variables and $(…) are not expanded",
        '`' => "backquotes are not run",
        '|' | '<' | '>' => "pipes and redirections need a shell",
        ';' | '&' => "command lists and background jobs need a shell",
        '(' | ')' => "subshells need a shell",
        '*' | '?' => "globs are not expanded",
        '~' => "~ is not expanded (write the full path)",
        _ => "comments are not supported",
    };
    format!(
        "'{c}' (character {at}): {what}. Quote it to pass it as it is, or run a shell: sh -c '…'"
    )
}

/// Reads a `'…'` word part after its opening quote into `word`.
fn single_quoted(
    chars: &mut impl Iterator<Item = (usize, char)>,
    word: &mut Word,
) -> Result<(), String> {
    word.quoting();
    for (_, c) in chars.by_ref() {
        if c == '\'' {
            return Ok(());
        }
        word.text.push(c);
    }
    Err("a ' is not closed".to_owned())
}

/// Reads a `"…"` word part after its opening quote into `word`.
fn double_quoted(
    chars: &mut impl Iterator<Item = (usize, char)>,
    word: &mut Word,
) -> Result<(), String> {
    word.quoting();
    while let Some((at, c)) = chars.next() {
        match c {
            '"' => return Ok(()),
            '\\' => match chars.next() {
                Some((_, escaped @ ('"' | '\\' | '$' | '`'))) => word.text.push(escaped),
                Some((_, '\n')) => {}
                Some((_, other)) => {
                    word.text.push('\\');
                    word.text.push(other);
                }
                None => break,
            },
            '$' | '`' => return Err(unsupported(c, at + 1)),
            _ => word.text.push(c),
        }
    }
    Err("a \" is not closed".to_owned())
}

/// Splits `text` into the job's settings and words; the error says what is wrong or not
/// supported, in words for the dialog.
pub fn split_command_line(text: &str) -> Result<CommandLine, String> {
    let mut words: Vec<Word> = Vec::new();
    let mut word: Option<Word> = None;
    let mut chars = text.chars().enumerate();
    while let Some((at, c)) = chars.next() {
        match c {
            c if c.is_whitespace() => words.extend(word.take()),
            '\'' => single_quoted(&mut chars, word.get_or_insert_with(Word::default))?,
            '"' => double_quoted(&mut chars, word.get_or_insert_with(Word::default))?,
            '\\' => {
                let word = word.get_or_insert_with(Word::default);
                word.quoting();
                match chars.next() {
                    Some((_, '\n')) => {}
                    Some((_, escaped)) => word.text.push(escaped),
                    None => return Err("the line ends with a \\".to_owned()),
                }
            }
            '$' | '`' | '|' | '<' | '>' | ';' | '&' | '(' | ')' | '*' | '?' => {
                return Err(unsupported(c, at + 1));
            }
            '~' | '#' if word.is_none() => return Err(unsupported(c, at + 1)),
            c => word.get_or_insert_with(Word::default).text.push(c),
        }
    }
    words.extend(word);
    let settings = words
        .iter()
        .take_while(|w| w.assignment().is_some())
        .count();
    let env: Vec<(String, String)> = words[..settings]
        .iter()
        .filter_map(Word::assignment)
        .collect();
    let command: Vec<String> = words.into_iter().skip(settings).map(|w| w.text).collect();
    if command.is_empty() {
        return Err(if env.is_empty() {
            "Type the command to run, e.g. python train.py --batch-size 32".to_owned()
        } else {
            "Only settings (NAME=value): which command should run with them?".to_owned()
        });
    }
    Ok(CommandLine { env, command })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(text: &str) -> Vec<String> {
        split_command_line(text)
            .map(|line| line.command)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn words_split_as_a_shell_splits_them() {
        assert_eq!(
            words("  python train.py   --lr=1e-3 "),
            ["python", "train.py", "--lr=1e-3"]
        );
        assert_eq!(
            words(r#"sh -c 'echo "$HOME"; exit 3'"#),
            ["sh", "-c", r#"echo "$HOME"; exit 3"#]
        );
        assert_eq!(
            words(r#"echo "a \"b\" \\ \$x \n" c\ d '' e"'f'"g"#),
            ["echo", r#"a "b" \ $x \n"#, "c d", "", "e'f'g"]
        );
        assert_eq!(words("a\\\nb"), ["ab"], "a backslash-newline joins lines");
        assert_eq!(
            words("python --layers=[1,2] x~y a#b"),
            ["python", "--layers=[1,2]", "x~y", "a#b"]
        );
    }

    #[test]
    fn leading_settings_set_the_environment() {
        let line =
            split_command_line("CUDA_VISIBLE_DEVICES=1 _X= torchrun A=b train.py").expect("splits");
        assert_eq!(
            line.env,
            [
                ("CUDA_VISIBLE_DEVICES".to_owned(), "1".to_owned()),
                ("_X".to_owned(), String::new())
            ]
        );
        assert_eq!(line.command, ["torchrun", "A=b", "train.py"]);
        // Quoted or not a name: a word of the command, as in a shell.
        assert_eq!(words("'A=1' run"), ["A=1", "run"]);
        assert_eq!(words("1A=1 run"), ["1A=1", "run"]);
        assert_eq!(
            split_command_line("A=\"1 2\" run").expect("splits").env,
            [("A".to_owned(), "1 2".to_owned())]
        );
    }

    #[test]
    fn what_needs_a_shell_is_refused_with_the_reason() {
        for (text, says) in [
            ("python train.py | tee log", "pipes and redirections"),
            ("python train.py > log", "pipes and redirections"),
            ("make; python train.py", "command lists"),
            ("python train.py &", "command lists and background jobs"),
            ("python $SCRIPT", "variables"),
            ("python \"$SCRIPT\"", "variables"),
            ("python `which x`", "backquotes"),
            ("python ~/train.py", "~ is not expanded"),
            ("python *.py", "globs"),
            ("(cd x)", "subshells"),
            ("python train.py # note", "comments"),
        ] {
            let error = split_command_line(text).expect_err(text);
            assert!(error.contains(says), "{text}: {error}");
            assert!(error.contains("sh -c"), "{text}: {error}");
        }
        for (text, says) in [
            ("", "Type the command"),
            ("   ", "Type the command"),
            ("A=1 B=2", "Only settings"),
            ("echo 'open", "' is not closed"),
            ("echo \"open", "\" is not closed"),
            ("echo \\", "ends with a \\"),
        ] {
            let error = split_command_line(text).expect_err(text);
            assert!(error.contains(says), "{text:?}: {error}");
        }
        // Quoted, they are passed as they are.
        assert_eq!(words("echo '|' \\; \"*\""), ["echo", "|", ";", "*"]);
    }
}
