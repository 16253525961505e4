//! The child catalog: the host-owned allow-list of children a supervisor may build.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

use arbor_model::{ModelProvider, ThinkingLevel};
use async_trait::async_trait;

use crate::agent::Agent;
use crate::error::{CoreError, CoreResult};
use crate::permission::Permission;
use crate::supervisor::config::limits::LimitsInput;
use crate::supervisor::config::policy::PolicyInput;
pub use crate::supervisor::config::policy::{MilestoneContext, MilestoneFn};
pub use crate::supervisor::runtime::{ChildContext, ChildEntry, ChildFactory};

/// A shared factory.
#[async_trait]
impl<T: ChildFactory + ?Sized> ChildFactory for Arc<T> {
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        (**self).create(ctx).await
    }
}

/// A factory from an async closure.
pub struct FnFactory<F>(F);

impl<F> fmt::Debug for FnFactory<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnFactory")
    }
}

#[async_trait]
impl<F, Fut> ChildFactory for FnFactory<F>
where
    F: Fn(ChildContext) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Agent>> + Send,
{
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        (self.0)(ctx).await
    }
}

/// Makes a factory of an async closure.
pub fn factory_fn<F, Fut>(f: F) -> FnFactory<F>
where
    F: Fn(ChildContext) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Agent>> + Send,
{
    FnFactory(f)
}

/// A factory that hands out one fixed agent.
#[derive(Debug, Clone)]
pub struct AgentFactory(pub Agent);

#[async_trait]
impl ChildFactory for AgentFactory {
    async fn create(&self, _ctx: ChildContext) -> CoreResult<Agent> {
        Ok(self.0.clone())
    }
}

/// Whatever a dynamically typed factory produced (a plugin or scripting bridge cannot promise
/// an [`Agent`] at compile time). The supervisor checks it is one before anything runs.
pub struct Product {
    value: Box<dyn Any + Send>,
    type_name: &'static str,
}

impl fmt::Debug for Product {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Product")
            .field("type", &self.type_name)
            .finish()
    }
}

impl Product {
    /// Wraps any value.
    pub fn new<T: Any + Send>(value: T) -> Self {
        let full = std::any::type_name::<T>();
        // The last path segment, generics kept: `alloc::string::String` → `String`.
        let head = full.split('<').next().unwrap_or(full);
        let start = head.rfind("::").map_or(0, |i| i + 2);
        Self {
            value: Box::new(value),
            type_name: &full[start..],
        }
    }

    /// The wrapped value's type name (last path segment).
    pub fn type_name(&self) -> &'static str {
        self.type_name
    }
}

/// Adapts a factory returning `Option<Product>` (`None` for nothing at all) into a
/// [`ChildFactory`]: anything but an [`Agent`] fails the delegation with
/// `child "<id>" factory must return an Agent, got <type>`.
pub struct ErasedFactory<F>(F);

impl<F> fmt::Debug for ErasedFactory<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ErasedFactory")
    }
}

#[async_trait]
impl<F, Fut> ChildFactory for ErasedFactory<F>
where
    F: Fn(ChildContext) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Option<Product>>> + Send,
{
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        let child_id = ctx.child_id.clone();
        let got = match (self.0)(ctx).await? {
            None => "None",
            Some(product) => {
                let type_name = product.type_name;
                match product.value.downcast::<Agent>() {
                    Ok(agent) => return Ok(*agent),
                    Err(_) => type_name,
                }
            }
        };
        Err(CoreError::Supervisor(format!(
            "child \"{child_id}\" factory must return an Agent, got {got}"
        )))
    }
}

/// Makes a factory of an async closure whose product is checked at run time.
pub fn erased_factory<F, Fut>(f: F) -> ErasedFactory<F>
where
    F: Fn(ChildContext) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Option<Product>>> + Send,
{
    ErasedFactory(f)
}

impl ChildEntry {
    /// An entry named `id` built by `factory`.
    pub fn new(id: impl Into<String>, factory: impl ChildFactory + 'static) -> Self {
        Self {
            id: id.into(),
            description: None,
            factory: Arc::new(factory),
            permission: Permission::allow_all(),
            limits: LimitsInput::default(),
            policy: PolicyInput::default(),
            scopes: None,
            model: None,
            allowed_models: Vec::new(),
            preflight: None,
            agent_name: None,
            milestone: None,
            thinking: BTreeMap::new(),
            budget: None,
            output: None,
            context: crate::session::fork::ContextPolicy::default(),
            standing: None,
        }
    }

    /// An entry that always runs `agent` (its model is the default, its provider
    /// preflights requested models).
    pub fn agent(id: impl Into<String>, agent: Agent) -> Self {
        let mut entry = Self::new(id, AgentFactory(agent.clone()))
            .model(agent.model())
            .preflight_with(agent.provider().clone());
        entry.agent_name = Some(agent.name().to_owned());
        entry
    }

    /// The model the child runs when a request names none. The factory gets the resolved
    /// model in [`ChildContext::model`] and must build an agent for exactly it.
    #[must_use]
    pub fn model(mut self, model: impl Into<String>) -> Self {
        self.model = Some(model.into());
        self
    }

    /// Models a request may choose besides the default; each is preflighted.
    #[must_use]
    pub fn allow_models<I, S>(mut self, models: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.allowed_models
            .extend(models.into_iter().map(Into::into));
        self
    }

    /// The provider that preflights a requested model before the child is admitted; it is
    /// also told of the child's calls that will never be answered (the child deleted while
    /// they waited for a decision, or its caller's run ended:
    /// [`ModelProvider::abandon`](arbor_model::ModelProvider::abandon)), so an entry whose
    /// factory builds agents on a provider that keeps work waiting remotely names it here.
    #[must_use]
    pub fn preflight_with(mut self, provider: Arc<dyn ModelProvider>) -> Self {
        self.preflight = Some(provider);
        self
    }

    /// The agent name the child's sessions record (default: the entry's id).
    #[must_use]
    pub fn agent_name(mut self, name: impl Into<String>) -> Self {
        self.agent_name = Some(name.into());
        self
    }

    /// The thinking levels `model` supports when it runs this child (a request may ask for
    /// any of them). This declaration wins over the provider's; a model declared by
    /// neither supports only `off`, so asking it for more is refused, never ignored.
    #[must_use]
    pub fn thinking_levels<I>(mut self, model: impl Into<String>, levels: I) -> Self
    where
        I: IntoIterator<Item = ThinkingLevel>,
    {
        let mut levels: Vec<ThinkingLevel> = levels.into_iter().collect();
        levels.sort();
        levels.dedup();
        self.thinking.insert(model.into(), levels);
        self
    }

    /// The thinking levels `model` supports for this child, least first: the entry's
    /// declaration, else its provider's, else only `off`.
    pub fn supported_thinking(&self, model: Option<&str>) -> Vec<ThinkingLevel> {
        let Some(model) = model else {
            return vec![ThinkingLevel::Off];
        };
        let declared = self.thinking.get(model).cloned().or_else(|| {
            self.preflight
                .as_ref()
                .and_then(|p| p.thinking_levels(model))
        });
        match declared {
            Some(mut levels) => {
                levels.sort();
                levels.dedup();
                levels
            }
            None => vec![ThinkingLevel::Off],
        }
    }

    /// Every model a request may name, the default first.
    pub fn models(&self) -> Vec<&str> {
        self.model
            .iter()
            .chain(&self.allowed_models)
            .map(String::as_str)
            .collect()
    }

    /// Decides which of the child's events are milestones when it reports `milestones`
    /// (instead of the built-in subset). `milestone.every_turns`, when a delegation sets it,
    /// still applies first: only events of every N-th turn are offered. A predicate that
    /// panics selects nothing.
    #[must_use]
    pub fn milestone_fn(
        mut self,
        predicate: impl Fn(&MilestoneContext<'_>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.milestone = Some(MilestoneFn(Arc::new(predicate)));
        self
    }

    /// What the child is for (shown to the parent model).
    #[must_use]
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = Some(description.into());
        self
    }

    /// A permission AND-composed onto every run of this child.
    #[must_use]
    pub fn permission(mut self, permission: Permission) -> Self {
        self.permission = permission;
        self
    }

    /// Limits for this child (they only lower the supervisor's).
    #[must_use]
    pub fn limits(mut self, limits: LimitsInput) -> Self {
        self.limits = limits;
        self
    }

    /// The pool every delegation of this child gets for its subtree when its request names
    /// none (see [`crate::budget`]).
    #[must_use]
    pub fn budget(mut self, budget: crate::budget::Budget) -> Self {
        self.budget = (!budget.is_empty()).then_some(budget);
        self
    }

    /// The JSON Schema every delegation of this child must answer in (see
    /// [`crate::output`]): its answer reaches the parent as the value, and a request may not
    /// name another schema.
    #[must_use]
    pub fn output_schema(mut self, output: crate::output::OutputSchema) -> Self {
        self.output = Some(output);
        self
    }

    /// Whether a spawn of this child may fork its parent's conversation into it (the
    /// default: it chooses, none unless it asks), must not, or must (see
    /// [`crate::session::fork`]).
    #[must_use]
    pub fn context(mut self, policy: crate::session::fork::ContextPolicy) -> Self {
        self.context = policy;
        self
    }

    /// Narrows the standing decisions its sessions inherit (see
    /// [`crate::approval::standing`]): its allows keep only what every layer above allows
    /// too, and its rejects add to theirs.
    #[must_use]
    pub fn standing(mut self, layer: crate::approval::standing::StandingLayer) -> Self {
        self.standing = Some(layer);
        self
    }

    /// The host's policy ceilings and defaults for this child.
    #[must_use]
    pub fn policy(mut self, policy: PolicyInput) -> Self {
        self.policy = policy;
        self
    }

    /// The scopes the child's identity is narrowed to (each must be held by the parent's;
    /// without this the parent's identity passes unchanged).
    #[must_use]
    pub fn scopes<I, S>(mut self, scopes: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.scopes = Some(scopes.into_iter().map(Into::into).collect());
        self
    }

    /// The entry's id.
    pub fn id(&self) -> &str {
        &self.id
    }
}
