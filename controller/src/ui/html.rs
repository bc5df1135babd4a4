//! HTML: escaping, the page frame every page shares, and small pieces (usage bars, forms).
//!
//! Every value that comes from the API or the user goes through [`esc`]; the page's markup is
//! written here and in the page modules as literals.

use std::fmt::Write;

/// `text` escaped for HTML text and attribute values (double-quoted).
pub fn esc(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Who is logged in, as the frame shows it.
pub struct Who {
    pub user: String,
    pub project: String,
    pub admin: bool,
}

/// A message carried to the next page (after a form's redirect).
pub struct Flash {
    pub error: bool,
    pub text: String,
}

/// What the frame of a page needs.
pub struct Frame<'a> {
    pub who: &'a Who,
    pub csrf: &'a str,
    pub flash: Option<&'a Flash>,
}

/// The navigation: (path, label, admins only).
const NAV: [(&str, &str, bool); 9] = [
    ("/ui/", "Overview", false),
    ("/ui/instances", "Instances", false),
    ("/ui/images", "Images", false),
    ("/ui/flavors", "Flavors", false),
    ("/ui/networks", "Networks", false),
    ("/ui/events", "Events", false),
    ("/ui/nodes", "Nodes", true),
    ("/ui/tenants", "Tenants", true),
    ("/ui/traces", "Traces", true),
];

/// A whole page: `title`, the navigation with `here` marked, `body` inside `<main>`.
pub fn page(frame: &Frame<'_>, title: &str, here: &str, body: &str) -> String {
    let mut nav = String::new();
    for (path, label, admin) in NAV {
        if admin && !frame.who.admin {
            continue;
        }
        let current = if path == here {
            " aria-current=\"page\""
        } else {
            ""
        };
        let _ = write!(nav, "<li><a href=\"{path}\"{current}>{label}</a></li>");
    }
    let role = if frame.who.admin { " (admin)" } else { "" };
    let flash = match frame.flash {
        Some(f) if f.error => format!(
            "<div class=\"flash error\" role=\"alert\" id=\"flash\">{}</div>",
            esc(&f.text)
        ),
        Some(f) => format!(
            "<div class=\"flash ok\" role=\"status\" id=\"flash\">{}</div>",
            esc(&f.text)
        ),
        None => String::new(),
    };
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · cumulo</title><link rel=\"stylesheet\" href=\"/ui/static/app.css\">\
         <script src=\"/ui/static/app.js\" defer></script></head><body>\
         <a class=\"skip\" href=\"#main\">Skip to content</a>\
         <header><span class=\"brand\">cumulo</span><nav aria-label=\"Main\"><ul>{nav}</ul></nav>\
         <div class=\"who\"><span id=\"who\">{user} · {project}{role}</span>\
         <form method=\"post\" action=\"/ui/logout\">{csrf}<button type=\"submit\">Log out</button></form>\
         </div></header>\
         <div id=\"conn\" class=\"conn\" role=\"status\" aria-live=\"polite\" hidden>\
         Lost contact with the controller; trying again…</div>\
         <main id=\"main\" tabindex=\"-1\"><h1>{title}</h1>{flash}{body}</main></body></html>",
        title = esc(title),
        user = esc(&frame.who.user),
        project = esc(&frame.who.project),
        csrf = csrf_field(frame.csrf),
    )
}

/// A page outside a session (the login page): no navigation.
pub fn bare(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{title} · cumulo</title><link rel=\"stylesheet\" href=\"/ui/static/app.css\">\
         </head><body><header><span class=\"brand\">cumulo</span></header>\
         <main id=\"main\"><h1>{title}</h1>{body}</main></body></html>",
        title = esc(title),
    )
}

/// One thing's page body: a link back to its list (`(path, label)`), and `detail`, live from
/// `{page}/live`, in an element of id `id`.
pub fn live_detail(back: (&str, &str), page: &str, id: &str, detail: &str) -> String {
    format!(
        "<p><a href=\"{}\">{}</a></p><div data-live=\"{}/live\" id=\"{id}\">{detail}</div>",
        back.0,
        esc(back.1),
        esc(page)
    )
}

/// The hidden field every form carries.
pub fn csrf_field(csrf: &str) -> String {
    format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        esc(csrf)
    )
}

/// A usage bar: `used` of `total` `unit`, labelled `label` for assistive technology.
pub fn usage(label: &str, used: u64, total: u64, unit: &str) -> String {
    let text = if total == 0 {
        format!("{used} {unit}")
    } else {
        format!("{used} / {total} {unit}")
    };
    format!(
        "<span class=\"usage\"><meter min=\"0\" max=\"{max}\" value=\"{used}\" \
         high=\"{high}\" optimum=\"0\" aria-label=\"{label}\">{text}</meter> \
         <span class=\"figure\">{text}</span></span>",
        max = total.max(1),
        high = total.max(1).saturating_mul(9) / 10,
        label = esc(label),
    )
}

/// A message in a live part or a page: `text` in words, as an alert when `error`.
pub fn notice(error: bool, text: &str) -> String {
    if error {
        format!("<p class=\"flash error\" role=\"alert\">{}</p>", esc(text))
    } else {
        format!("<p class=\"note\">{}</p>", esc(text))
    }
}

/// How far back a [`plot`] goes, in seconds.
const PLOT_SPAN: f64 = 3600.0;

/// A small line plot (inline SVG, no script, no style attribute) of `points`, each (seconds
/// before now, value), against `max`, over the last hour, `width` × `height` pixels; `label`
/// names it for assistive technology.
pub fn plot(label: &str, points: &[(f64, f64)], max: f64, width: u32, height: u32) -> String {
    let (w, h) = (f64::from(width), f64::from(height));
    let top = points.iter().map(|p| p.1).fold(max, f64::max).max(1.0);
    let xy = |(age, value): (f64, f64)| {
        let x = w * (1.0 - (age / PLOT_SPAN).clamp(0.0, 1.0));
        let y = h - 1.0 - (value / top).clamp(0.0, 1.0) * (h - 2.0);
        (x, y)
    };
    let mut line = String::new();
    for p in points {
        let (x, y) = xy(*p);
        let _ = write!(line, "{x:.1},{y:.1} ");
    }
    let last = points.last().map(|p| {
        let (x, y) = xy(*p);
        format!("<circle cx=\"{x:.1}\" cy=\"{y:.1}\" r=\"2\" fill=\"currentColor\"/>")
    });
    format!(
        "<svg class=\"plot\" viewBox=\"0 0 {width} {height}\" width=\"{width}\" height=\"{height}\" \
         role=\"img\" aria-label=\"{label}\"><title>{label}</title>\
         <polyline points=\"{line}\" fill=\"none\" stroke=\"currentColor\" stroke-width=\"1.5\"/>{last}</svg>",
        label = esc(label),
        line = line.trim_end(),
        last = last.unwrap_or_default(),
    )
}
