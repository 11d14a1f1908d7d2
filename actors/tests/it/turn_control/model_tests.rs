//! The model of a session follows its last `config_changed`: `SessionHandle::set_model`
//! records one when the provider or model differs (never twice for the same), and the
//! next turn's requests name the new model.

use super::*;

#[tokio::test]
async fn set_model_records_config_changed_and_the_next_turn_uses_it() {
    let tools = tools();
    let client = Capture::new(json!({"responses": [{"text": "one"}, {"text": "two"}]}));
    let requests = Arc::clone(&client.requests);
    let rt = foya_actors::Runtime::start(config(store(), client, &tools))
        .await
        .unwrap();
    let mut created = foya_protocol::SessionConfig::new(std::env::temp_dir());
    created.provider = "gateway".into();
    created.model = "old-model".into();
    let session = rt.create_session(created).await.unwrap();
    let mut sub = subscribe(&session, false).await;
    session.submit(Input::text("first")).await.unwrap();
    until(&mut sub, is_complete).await;
    // The same model: nothing is written.
    session
        .set_model("gateway".into(), "old-model".into())
        .await
        .unwrap();
    session
        .set_model("gateway".into(), "new-model".into())
        .await
        .unwrap();
    session.submit(Input::text("second")).await.unwrap();
    let events = until(&mut sub, is_complete).await;
    assert_eq!(
        events[0].kind,
        EventKind::ConfigChanged {
            provider: "gateway".into(),
            model: "new-model".into()
        }
    );
    assert_eq!(
        types(&events)
            .iter()
            .filter(|t| **t == "config_changed")
            .count(),
        1
    );
    let models: Vec<String> = requests
        .lock()
        .unwrap()
        .iter()
        .map(|r| r.model.clone())
        .collect();
    assert_eq!(models, vec!["old-model".to_owned(), "new-model".to_owned()]);
    rt.shutdown().await;
}
