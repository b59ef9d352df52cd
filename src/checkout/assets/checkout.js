// The hosted checkout's only script. It validates the form, tokenizes the card directly with
// the payment processor using the account's public key (the card never reaches our server),
// then asks our server to complete the session with the token. No dependencies.
(function () {
  "use strict";
  var root = document.getElementById("checkout");
  if (!root) return;
  var d = root.dataset;
  var form = document.getElementById("pay-form");
  var button = document.getElementById("pay-button");
  var label = document.getElementById("pay-label");
  var payText = label.textContent;
  var acceptance = null;

  function $(id) { return document.getElementById(id); }
  function digits(s) { return (s || "").replace(/\D/g, ""); }

  function setError(id, message) {
    var input = $(id), slot = $(id + "-error");
    if (slot) slot.textContent = message || "";
    if (input && input.setAttribute) input.setAttribute("aria-invalid", message ? "true" : "false");
  }
  function formError(message) { $("form-error").textContent = message || ""; }

  function luhn(number) {
    if (!/^\d{12,19}$/.test(number)) return false;
    var sum = 0;
    for (var i = 0; i < number.length; i++) {
      var n = +number[number.length - 1 - i];
      if (i % 2 === 1) { n *= 2; if (n > 9) n -= 9; }
      sum += n;
    }
    return sum % 10 === 0;
  }

  // "MM/YY" (or MM/YYYY) not before the current month.
  function expiry(raw) {
    var m = /^\s*(\d{1,2})\s*\/?\s*(\d{2}|\d{4})\s*$/.exec(raw || "");
    if (!m) return null;
    var month = +m[1], year = m[2].length === 2 ? 2000 + +m[2] : +m[2];
    if (month < 1 || month > 12) return null;
    var now = new Date();
    if (year < now.getFullYear() || (year === now.getFullYear() && month < now.getMonth() + 1)) return null;
    return { month: (month < 10 ? "0" : "") + month, year: String(year % 100).padStart(2, "0") };
  }

  // Formatting as the customer types: groups of four digits, and MM/YY.
  $("card-number").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 19);
    e.target.value = v.replace(/(\d{4})(?=\d)/g, "$1 ");
  });
  $("card-expiry").addEventListener("input", function (e) {
    var v = digits(e.target.value).slice(0, 4);
    e.target.value = v.length > 2 ? v.slice(0, 2) + "/" + v.slice(2) : v;
  });

  function validate() {
    var ok = true, first = null;
    function check(id, valid, message) {
      setError(id, valid ? "" : message);
      if (!valid) { ok = false; first = first || id; }
    }
    if ($("customer-name")) {
      check("customer-name", $("customer-name").value.trim().length > 0, d.errName);
      check("customer-email", /^[^\s@]+@[^\s@]+\.[^\s@]+$/.test($("customer-email").value.trim()), d.errEmail);
    }
    check("card-number", luhn(digits($("card-number").value)), d.errCard);
    check("card-expiry", expiry($("card-expiry").value) !== null, d.errExpiry);
    check("card-cvc", /^\d{3,4}$/.test($("card-cvc").value.trim()), d.errCvc);
    check("card-holder", $("card-holder").value.trim().length >= 5, d.errHolder);
    check("accept-terms", $("accept-terms").checked, d.errAccept);
    if (first) $(first).focus();
    return ok;
  }

  function busy(on) {
    button.disabled = on;
    label.textContent = on ? d.paying : payText;
    form.setAttribute("aria-busy", on ? "true" : "false");
  }

  function json(response) {
    return response.text().then(function (text) {
      var body = null;
      try { body = text ? JSON.parse(text) : null; } catch (e) { body = null; }
      return { status: response.status, body: body };
    });
  }

  // The processor's terms: their acceptance token goes with the payment, their link is shown.
  fetch(d.processor + "/merchants/" + encodeURIComponent(d.key))
    .then(json)
    .then(function (r) {
      var p = r.body && r.body.data && r.body.data.presigned_acceptance;
      if (r.status !== 200 || !p) throw new Error("terms");
      acceptance = p.acceptance_token;
      $("terms-link").href = p.permalink;
      button.disabled = false;
    })
    .catch(function () { formError(d.errTerms); });

  function tokenize() {
    var exp = expiry($("card-expiry").value);
    return fetch(d.processor + "/tokens/cards", {
      method: "POST",
      headers: { "Content-Type": "application/json", "Authorization": "Bearer " + d.key },
      body: JSON.stringify({
        number: digits($("card-number").value),
        cvc: $("card-cvc").value.trim(),
        exp_month: exp.month,
        exp_year: exp.year,
        card_holder: $("card-holder").value.trim()
      })
    }).then(json);
  }

  function complete(token, attempt) {
    var body = { card_token: token, acceptance_token: acceptance };
    if ($("customer-name")) {
      body.customer_name = $("customer-name").value.trim();
      body.customer_email = $("customer-email").value.trim();
    }
    return fetch(encodeURIComponent(d.session) + "/complete", {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body)
    }).then(json).then(function (r) {
      // 202: the processor has not answered yet; asking again joins the same payment.
      if (r.status === 202 && attempt < 30) {
        return new Promise(function (resolve) { setTimeout(resolve, 1000); })
          .then(function () { return complete(token, attempt + 1); });
      }
      return r;
    });
  }

  function showConfirmation(out) {
    var s = out.summary || {};
    $("summary-plan").textContent = s.plan_name || "";
    $("summary-card").textContent = (s.card_brand || "") + " •••• " + (s.card_last4 || "");
    $("summary-email").textContent = s.customer_email || "";
    $("summary-subscription").textContent = out.subscription_id || "";
    form.hidden = true;
    $("confirmation").hidden = false;
    $("confirmation").focus();
  }

  function clearCard() {
    $("card-number").value = "";
    $("card-cvc").value = "";
    $("card-number").focus();
  }

  form.addEventListener("submit", function (e) {
    e.preventDefault();
    if (button.disabled) return;
    formError("");
    if (!validate()) return;
    busy(true);
    tokenize()
      .then(function (t) {
        if (t.status !== 201 || !t.body || !t.body.data) {
          setError("card-number", d.errProcessor);
          busy(false);
          return;
        }
        return complete(t.body.data.id, 0).then(function (r) {
          var error = r.body && r.body.error;
          if (r.status === 200) {
            if (r.body.redirect_url) { window.location.assign(r.body.redirect_url); return; }
            showConfirmation(r.body);
            return;
          }
          if (r.status === 409) {
            // Completed or expired meanwhile: the page itself says which.
            if (d.cancel && error && /expired/.test(error.message || "")) { window.location.assign(d.cancel); return; }
            window.location.reload();
            return;
          }
          busy(false);
          if (error && error.type === "processor_error") { formError(d.errDeclined); clearCard(); }
          else if (error && error.type === "insufficient_balance") formError(d.errUnavailable);
          else if (error && error.param === "customer_email") setError("customer-email", d.errEmail);
          else if (error && error.param === "customer_name") setError("customer-name", d.errName);
          else formError((error && error.message) || d.errProcessor);
        });
      })
      .catch(function () { busy(false); formError(d.errNetwork); });
  });
})();
