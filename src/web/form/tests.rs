//! Tests of the configuration form: a config survives it, fields that cannot be read are
//! named, and PutJob's errors are drawn next to their field.

use super::*;

fn config() -> proto::JobConfig {
    proto::JobConfig {
        job_name: "j".into(),
        cron: "0/5 * * * * ?".into(),
        sharding_total_count: 3,
        sharding_item_parameters: [(0, "a".to_string()), (2, "c".to_string())].into(),
        misfire: Some(true),
        monitor_execution: Some(true),
        sharding_strategy: proto::ShardingStrategy::RoundRobin as i32,
        max_time_diff_seconds: Some(-1),
        reconcile_interval_minutes: Some(10),
        props: [("k".to_string(), "v=w".to_string())].into(),
        ..Default::default()
    }
}

#[test]
fn a_config_survives_the_form() {
    let form = ConfigForm::from_config(&config());
    assert_eq!(form.text("sharding_item_parameters"), "0=a,2=c");
    let back = ConfigForm::from_fields(&form.fields())
        .to_proto("j", 0)
        .unwrap();
    assert_eq!(back, config());
}

#[test]
fn fields_that_cannot_be_read_are_named() {
    let mut form = ConfigForm::from_config(&config());
    form.values
        .insert("sharding_total_count".into(), "three".into());
    form.values.insert("props".into(), "novalue".into());
    form.values
        .insert("sharding_item_parameters".into(), "x=y".into());
    let errors = form.to_proto("j", 0).unwrap_err();
    assert_eq!(
        errors.keys().map(String::as_str).collect::<Vec<_>>(),
        ["props", "sharding_item_parameters", "sharding_total_count"]
    );
    let at = |field: &str| field_error(field, "is wrong");
    assert_eq!(at("config.cron"), ("cron".into(), "is wrong".into()));
    assert_eq!(at("config.job_type").0, "_");
    assert_eq!(at("config.retry.max_attempts").0, "retry_max_attempts");
    assert_eq!(
        at("config.retry.initial_backoff").0,
        "retry_initial_backoff"
    );
    assert_eq!(at("config.retry.max_backoff").0, "retry_max_backoff");
    assert_eq!(at("config.retry.multiplier").0, "retry_multiplier");
    assert_eq!(
        at("config.job_error_handler_type").0,
        "job_error_handler_type"
    );
    assert_eq!(
        at("config.props[\"email.host\"]"),
        ("props".into(), "email.host: is wrong".into())
    );
    assert_eq!(at("config.props"), ("props".into(), "is wrong".into()));
}

#[test]
fn a_handlers_prop_refused_by_put_job_is_shown_at_the_properties() {
    let mut c = config();
    c.job_error_handler_type = "WEBHOOK".into();
    c.props = [("webhook.url".to_string(), "ftp://alerts".to_string())].into();
    let form = ConfigForm::from_config(&c);
    let wire = ConfigForm::from_fields(&form.fields())
        .to_proto("j", 0)
        .unwrap();
    let Err(crate::coordination::CoordError::InvalidArgument { field, message }) =
        crate::api::convert::from_proto("j", &wire, false)
    else {
        panic!("a webhook that is not http(s) is refused");
    };
    let (at, shown) = field_error(&field, &message);
    assert_eq!(at, "props");
    assert!(shown.starts_with("webhook.url: "), "{shown}");
    let errors: FieldErrors = [(at, shown)].into();
    let html = form.render("j", &Viewer::default(), &errors);
    assert!(
        html.contains(r#"<p class="field-error" id="error-props">webhook.url: "#),
        "{html}"
    );
    assert!(!html.contains(r#"id="error-form""#), "{html}");
}

#[test]
fn errors_are_drawn_next_to_their_field() {
    let form = ConfigForm::from_config(&config());
    let errors: FieldErrors = [("cron".to_string(), "<bad>".to_string())].into();
    let html = form.render("j", &Viewer::default(), &errors);
    assert!(html.contains(r#"<p class="field-error" id="error-cron">&lt;bad&gt;</p>"#));
    assert!(html.contains(r#"id="field-cron""#));
}
