//! `Kwargs`: the keyword arguments of an env constructor (strings,
//! integers, floats, bools and lists), small enough to travel to another
//! process, and `KwargsReader`, which constructors read them with.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use tensordict::{NonTensor, TensorDict};

use crate::EnvError;

/// The name an empty keyword travels under in [`Kwargs::to_bytes`].
const EMPTY_KEY: &str = "\u{0}empty";

/// One keyword argument value.
#[derive(Clone, Debug, PartialEq)]
pub enum KwValue {
    /// A string.
    Str(String),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// A bool.
    Bool(bool),
    /// A list of values.
    List(Vec<KwValue>),
}

impl KwValue {
    /// The type's name, for messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            KwValue::Str(_) => "a string",
            KwValue::Int(_) => "an int",
            KwValue::Float(_) => "a float",
            KwValue::Bool(_) => "a bool",
            KwValue::List(_) => "a list",
        }
    }
}

impl fmt::Display for KwValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KwValue::Str(s) => write!(f, "{s:?}"),
            KwValue::Int(v) => write!(f, "{v}"),
            KwValue::Float(v) => write!(f, "{v:?}"),
            KwValue::Bool(v) => write!(f, "{v}"),
            KwValue::List(items) => {
                f.write_str("[")?;
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        f.write_str(", ")?;
                    }
                    write!(f, "{item}")?;
                }
                f.write_str("]")
            }
        }
    }
}

/// Parses a command-line value: `true`/`false`, an integer, a float, a
/// comma-separated list in brackets (`[1,2]`), a string in double quotes
/// (`"1"` is the string 1), or else the text as a string. Never fails.
/// `Display` writes what this parses back, for values without commas in
/// strings inside lists.
impl FromStr for KwValue {
    type Err = std::convert::Infallible;
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let text = text.trim();
        Ok(
            if let Some(quoted) = text
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .filter(|_| text.len() >= 2)
            {
                KwValue::Str(quoted.replace("\\\"", "\"").replace("\\\\", "\\"))
            } else if text == "true" {
                KwValue::Bool(true)
            } else if text == "false" {
                KwValue::Bool(false)
            } else if let Ok(v) = text.parse::<i64>() {
                KwValue::Int(v)
            } else if let Ok(v) = text.parse::<f64>() {
                KwValue::Float(v)
            } else if let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) {
                if inner.trim().is_empty() {
                    KwValue::List(Vec::new())
                } else {
                    KwValue::List(
                        inner
                            .split(',')
                            .map(|item| item.parse().unwrap_or_else(|never| match never {}))
                            .collect(),
                    )
                }
            } else {
                KwValue::Str(text.to_owned())
            },
        )
    }
}

macro_rules! kw_from {
    ($($ty:ty => $variant:ident $(as $cast:ty)?),* $(,)?) => {$(
        impl From<$ty> for KwValue {
            fn from(v: $ty) -> Self {
                KwValue::$variant((v $(as $cast)?).into())
            }
        }
    )*};
}

kw_from!(
    &str => Str,
    String => Str,
    i64 => Int,
    i32 => Int as i64,
    u32 => Int as i64,
    f64 => Float,
    f32 => Float as f64,
    bool => Bool,
);

impl<T: Into<KwValue>> From<Vec<T>> for KwValue {
    fn from(items: Vec<T>) -> Self {
        KwValue::List(items.into_iter().map(Into::into).collect())
    }
}

/// Keyword arguments for an env constructor, sorted by name.
///
/// ```
/// use envs::{KwValue, Kwargs};
/// let kwargs = Kwargs::new().with("max_steps", 10).with("mode", "spin");
/// assert_eq!(kwargs.get("max_steps"), Some(&KwValue::Int(10)));
/// let parsed = Kwargs::parse(["max_steps=10", "mode=spin"]).unwrap();
/// assert_eq!(parsed, kwargs);
/// ```
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Kwargs(BTreeMap<String, KwValue>);

impl Kwargs {
    /// No keyword argument.
    pub fn new() -> Kwargs {
        Kwargs::default()
    }

    /// These keyword arguments plus `key = value`.
    pub fn with(mut self, key: impl Into<String>, value: impl Into<KwValue>) -> Kwargs {
        self.set(key, value);
        self
    }

    /// Sets `key = value`, replacing any earlier value.
    pub fn set(&mut self, key: impl Into<String>, value: impl Into<KwValue>) {
        self.0.insert(key.into(), value.into());
    }

    /// The value of `key`, if given.
    pub fn get(&self, key: &str) -> Option<&KwValue> {
        self.0.get(key)
    }

    /// The arguments, sorted by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &KwValue)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v))
    }

    /// Number of arguments.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True if there is none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses `key=value` strings (values as by [`KwValue::from_str`]).
    pub fn parse<I, S>(pairs: I) -> Result<Kwargs, EnvError>
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut kwargs = Kwargs::new();
        for pair in pairs {
            let text = pair.as_ref();
            match text.split_once('=') {
                Some((key, value)) if !key.trim().is_empty() => {
                    let value: KwValue = value.parse().unwrap_or_else(|never| match never {});
                    kwargs.set(key.trim(), value);
                }
                _ => {
                    return Err(EnvError::KwargSyntax {
                        text: text.to_owned(),
                    })
                }
            }
        }
        Ok(kwargs)
    }

    /// The arguments as bytes (the `tensordict` codec), to send to another
    /// process; [`Kwargs::from_bytes`] reads them back exactly.
    pub fn to_bytes(&self) -> Vec<u8> {
        fn value(v: &KwValue) -> NonTensor {
            match v {
                KwValue::Str(s) => NonTensor::Str(s.clone()),
                KwValue::Int(i) => NonTensor::Int(*i),
                KwValue::Float(f) => NonTensor::Float(*f),
                KwValue::Bool(b) => NonTensor::Bool(*b),
                KwValue::List(items) => NonTensor::Stack(items.iter().map(value).collect()),
            }
        }
        let mut td = TensorDict::new(&[]);
        for (key, v) in &self.0 {
            // A batch size of [] accepts any non-tensor value; an empty key
            // cannot be set, so it is sent under a reserved name.
            let name = if key.is_empty() {
                EMPTY_KEY
            } else {
                key.as_str()
            };
            td.set(name, value(v))
                .expect("a non-tensor fits batch size []");
        }
        tensordict::encode(&td)
    }

    /// Reads arguments written by [`Kwargs::to_bytes`]; an error on bytes
    /// that are not such arguments.
    pub fn from_bytes(bytes: &[u8]) -> Result<Kwargs, EnvError> {
        fn value(v: &NonTensor) -> KwValue {
            match v {
                NonTensor::Str(s) => KwValue::Str(s.clone()),
                NonTensor::Int(i) => KwValue::Int(*i),
                NonTensor::Float(f) => KwValue::Float(*f),
                NonTensor::Bool(b) => KwValue::Bool(*b),
                NonTensor::Stack(items) => KwValue::List(items.iter().map(value).collect()),
            }
        }
        let bad = |reason: String| EnvError::KwargSyntax { text: reason };
        let td = tensordict::decode(bytes)
            .map_err(|err| bad(format!("<{} bytes: {err}>", bytes.len())))?;
        let mut kwargs = Kwargs::new();
        for (key, entry) in td.iter() {
            let v = entry.as_non_tensor().ok_or_else(|| {
                bad(format!(
                    "<entry {key:?} is a {}, not a value>",
                    entry.kind()
                ))
            })?;
            let key = if key == EMPTY_KEY { "" } else { key };
            kwargs.set(key, value(v));
        }
        Ok(kwargs)
    }

    /// A reader for the constructor of `env`, which must accept exactly the
    /// keywords in `accepted`.
    pub fn reader<'a>(&'a self, env: &str, accepted: &[&str]) -> KwargsReader<'a> {
        KwargsReader {
            kwargs: self,
            env: env.to_owned(),
            accepted: accepted.iter().map(|s| (*s).to_owned()).collect(),
        }
    }
}

impl fmt::Display for Kwargs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (k, v)) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{k}={v}")?;
        }
        Ok(())
    }
}

/// Reads an env's keyword arguments with typed errors that name the env and
/// list what it accepts. Create it with [`Kwargs::reader`]; call
/// [`KwargsReader::finish`] to reject keywords the env does not accept.
///
/// ```
/// use envs::Kwargs;
/// # fn main() -> Result<(), envs::EnvError> {
/// let kwargs = Kwargs::new().with("max_steps", 5);
/// let reader = kwargs.reader("CountingEnv", &["max_steps", "start_val"]);
/// assert_eq!(reader.int("max_steps", Some(10))?, 5);
/// assert_eq!(reader.int("start_val", Some(0))?, 0);
/// reader.finish()?;
///
/// let bad = Kwargs::new().with("max_step", 5);
/// let err = bad.reader("CountingEnv", &["max_steps"]).finish().unwrap_err();
/// assert!(err.to_string().contains("unknown keyword argument(s) [max_step]"));
/// # Ok(()) }
/// ```
#[derive(Debug)]
pub struct KwargsReader<'a> {
    kwargs: &'a Kwargs,
    env: String,
    accepted: Vec<String>,
}

impl KwargsReader<'_> {
    fn value(&self, key: &str) -> Result<Option<&KwValue>, EnvError> {
        debug_assert!(self.accepted.iter().any(|a| a == key), "{key} not declared");
        Ok(self.kwargs.get(key))
    }

    fn missing(&self, key: &str) -> EnvError {
        EnvError::MissingKwarg {
            env: self.env.clone(),
            key: key.to_owned(),
            accepted: self.accepted.clone(),
        }
    }

    fn mistyped(&self, key: &str, expected: &'static str, found: &KwValue) -> EnvError {
        EnvError::KwargType {
            env: self.env.clone(),
            key: key.to_owned(),
            expected,
            found: format!("{} ({found})", found.type_name()),
        }
    }

    /// An integer; `default` when not given (`None`: required).
    pub fn int(&self, key: &str, default: Option<i64>) -> Result<i64, EnvError> {
        match self.value(key)? {
            Some(KwValue::Int(v)) => Ok(*v),
            Some(other) => Err(self.mistyped(key, "an int", other)),
            None => default.ok_or_else(|| self.missing(key)),
        }
    }

    /// A non-negative integer that fits `u64`.
    pub fn uint(&self, key: &str, default: Option<u64>) -> Result<u64, EnvError> {
        let value = self.int(key, default.map(|d| d as i64))?;
        u64::try_from(value).map_err(|_| self.invalid(key, format!("must be >= 0, got {value}")))
    }

    /// A float (an int is accepted and converted).
    pub fn float(&self, key: &str, default: Option<f64>) -> Result<f64, EnvError> {
        match self.value(key)? {
            Some(KwValue::Float(v)) => Ok(*v),
            Some(KwValue::Int(v)) => Ok(*v as f64),
            Some(other) => Err(self.mistyped(key, "a float", other)),
            None => default.ok_or_else(|| self.missing(key)),
        }
    }

    /// A bool.
    pub fn bool(&self, key: &str, default: Option<bool>) -> Result<bool, EnvError> {
        match self.value(key)? {
            Some(KwValue::Bool(v)) => Ok(*v),
            Some(other) => Err(self.mistyped(key, "a bool", other)),
            None => default.ok_or_else(|| self.missing(key)),
        }
    }

    /// A string.
    pub fn string(&self, key: &str, default: Option<&str>) -> Result<String, EnvError> {
        match self.value(key)? {
            Some(KwValue::Str(v)) => Ok(v.clone()),
            Some(other) => Err(self.mistyped(key, "a string", other)),
            None => default.map(str::to_owned).ok_or_else(|| self.missing(key)),
        }
    }

    /// A list.
    pub fn list(&self, key: &str, default: Option<Vec<KwValue>>) -> Result<Vec<KwValue>, EnvError> {
        match self.value(key)? {
            Some(KwValue::List(v)) => Ok(v.clone()),
            Some(other) => Err(self.mistyped(key, "a list", other)),
            None => default.ok_or_else(|| self.missing(key)),
        }
    }

    /// An error for a value of the right type that is out of range.
    pub fn invalid(&self, key: &str, reason: impl Into<String>) -> EnvError {
        EnvError::InvalidKwarg {
            env: self.env.clone(),
            key: key.to_owned(),
            reason: reason.into(),
        }
    }

    /// Checks that every keyword given is accepted by the env.
    pub fn finish(self) -> Result<(), EnvError> {
        let unknown: Vec<String> = self
            .kwargs
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !self.accepted.iter().any(|a| a == k))
            .map(str::to_owned)
            .collect();
        if unknown.is_empty() {
            Ok(())
        } else {
            Err(EnvError::UnknownKwargs {
                env: self.env,
                keys: unknown,
                accepted: self.accepted,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_values() {
        let kwargs =
            Kwargs::parse(["a=1", "b=2.5", "c=true", "d=[1, x]", "e=hello", "f="]).unwrap();
        assert_eq!(kwargs.get("a"), Some(&KwValue::Int(1)));
        assert_eq!(kwargs.get("b"), Some(&KwValue::Float(2.5)));
        assert_eq!(kwargs.get("c"), Some(&KwValue::Bool(true)));
        assert_eq!(
            kwargs.get("d"),
            Some(&KwValue::List(vec![
                KwValue::Int(1),
                KwValue::Str("x".into())
            ]))
        );
        assert_eq!(kwargs.get("e"), Some(&KwValue::Str("hello".into())));
        assert_eq!(kwargs.get("f"), Some(&KwValue::Str(String::new())));
        let err = Kwargs::parse(["novalue"]).unwrap_err();
        assert_eq!(
            err.to_string(),
            "cannot parse keyword argument \"novalue\": expected key=value"
        );
        assert!(Kwargs::parse(["=3"]).is_err());
        assert_eq!(
            kwargs.to_string(),
            "a=1, b=2.5, c=true, d=[1, \"x\"], e=\"hello\", f=\"\""
        );
    }

    #[test]
    fn display_parses_back_and_bytes_round_trip() {
        let kwargs = Kwargs::new()
            .with("mode", "spin")
            .with("digits", "1")
            .with("n", 3)
            .with("x", 0.1)
            .with("flag", false)
            .with(
                "list",
                vec![
                    KwValue::Int(1),
                    KwValue::Str("a".into()),
                    KwValue::List(vec![]),
                ],
            );
        let text = kwargs.to_string();
        let pairs: Vec<String> = kwargs.iter().map(|(k, v)| format!("{k}={v}")).collect();
        assert_eq!(Kwargs::parse(&pairs).unwrap(), kwargs, "{text}");
        assert_eq!(Kwargs::from_bytes(&kwargs.to_bytes()).unwrap(), kwargs);
        let mut odd = Kwargs::new();
        odd.set("", KwValue::Float(f64::MIN_POSITIVE));
        assert_eq!(Kwargs::from_bytes(&odd.to_bytes()).unwrap(), odd);
        let err = Kwargs::from_bytes(b"junk").unwrap_err();
        assert!(
            err.to_string().contains("not a tensordict message"),
            "{err}"
        );
    }

    #[test]
    fn reader_errors_name_env_key_and_what_is_accepted() {
        let kwargs = Kwargs::new()
            .with("n", "three")
            .with("f", 1)
            .with("neg", -1);
        let reader = kwargs.reader("Demo", &["n", "f", "neg", "req", "b", "s", "l"]);
        assert_eq!(
            reader.int("n", Some(1)).unwrap_err().to_string(),
            "Demo: keyword argument \"n\" must be an int, got a string (\"three\")"
        );
        assert_eq!(reader.float("f", None).unwrap(), 1.0);
        assert_eq!(
            reader.int("req", None).unwrap_err().to_string(),
            "Demo: missing keyword argument \"req\"; accepted: [n, f, neg, req, b, s, l]"
        );
        assert_eq!(
            reader.uint("neg", None).unwrap_err().to_string(),
            "Demo: keyword argument \"neg\" is invalid: must be >= 0, got -1"
        );
        assert!(reader.bool("n", None).is_err());
        assert!(reader.string("f", None).is_err());
        assert!(reader.list("f", None).is_err());
        assert!(reader.bool("b", Some(true)).unwrap());
        assert_eq!(reader.string("s", Some("x")).unwrap(), "x");
        assert!(reader.list("l", Some(vec![])).unwrap().is_empty());
        reader.finish().unwrap();
    }
}
