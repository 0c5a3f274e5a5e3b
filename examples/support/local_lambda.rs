//! The Lambda examples' two lives: the function, when Lambda (or a local Runtime API) started
//! the process, and otherwise a demo that plays Lambda by starting the same binary as the
//! function against a local Runtime API.

use idem_lambda::testing::RuntimeApi;
use std::future::Future;
use std::process::{Child, Command};

/// The examples' error.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// Runs `function` if `AWS_LAMBDA_RUNTIME_API` is set, else `demo`, on a Tokio runtime.
pub fn function_or_demo<F, D>(
    function: impl FnOnce() -> F,
    demo: impl FnOnce() -> D,
) -> Result<(), Error>
where
    F: Future<Output = Result<(), Error>>,
    D: Future<Output = Result<(), Error>>,
{
    let runtime = tokio::runtime::Runtime::new()?;
    if std::env::var_os("AWS_LAMBDA_RUNTIME_API").is_some() {
        runtime.block_on(function())
    } else {
        runtime.block_on(demo())
    }
}

/// This binary started as the function `name` against `api`, with `env` besides Lambda's own;
/// stopped when dropped.
pub struct LocalFunction(Child);

impl LocalFunction {
    /// Starts it.
    pub fn start(
        api: &RuntimeApi,
        name: &str,
        env: &[(&str, &str)],
    ) -> Result<LocalFunction, Error> {
        let child = Command::new(std::env::current_exe()?)
            .envs(api.function_env(name))
            .envs(env.iter().copied())
            .spawn()?;
        Ok(LocalFunction(child))
    }
}

impl Drop for LocalFunction {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
