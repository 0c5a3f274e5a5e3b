//! Every form `store` may take: a concrete store, a reference, `&dyn Store`, `Arc<dyn Store>`,
//! `Box<dyn Store>`, and any expression (a call; a `LazyLock` static, dereferenced).
use idem_core::{idempotent, MemoryStore, Store};
use std::sync::{Arc, LazyLock};

static GLOBAL: LazyLock<MemoryStore> = LazyLock::new(MemoryStore::new);

struct App {
    concrete: MemoryStore,
    shared: Arc<dyn Store>,
    boxed: Box<dyn Store>,
}

impl App {
    fn store(&self) -> &dyn Store {
        &self.concrete
    }
}

#[idempotent(key = "a:{id}", store = app.concrete)]
async fn concrete(app: &App, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "b:{id}", store = &app.concrete)]
async fn reference(app: &App, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "c:{id}", store = store)]
async fn dyn_ref(store: &dyn Store, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "d:{id}", store = app.shared)]
async fn arc_dyn(app: &App, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "e:{id}", store = app.boxed)]
async fn box_dyn(app: &App, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "f:{id}", store = app.store())]
async fn method_call(app: &App, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "g:{id}", store = *GLOBAL)]
async fn global(id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[idempotent(key = "h:{id}", store = store)]
async fn owned_arc(store: Arc<dyn Store>, id: u32) -> Result<(), std::io::Error> { Ok(()) }

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let app = App {
        concrete: MemoryStore::new(),
        shared: Arc::new(MemoryStore::new()),
        boxed: Box::new(MemoryStore::new()),
    };
    let _ = concrete(&app, 1).await;
    let _ = reference(&app, 1).await;
    let _ = dyn_ref(&app.concrete, 1).await;
    let _ = arc_dyn(&app, 1).await;
    let _ = box_dyn(&app, 1).await;
    let _ = method_call(&app, 1).await;
    let _ = global(1).await;
    let _ = owned_arc(app.shared.clone(), 1).await;
}
