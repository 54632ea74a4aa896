// e1 view bundle: data/*.js files hand their values to e1Bundle.put; the page asks e1Bundle.get,
// which loads a data file with a <script> tag (a page opened from file:// may do that, not fetch).
"use strict";

window.e1Bundle = {
  values: {},
  waiting: {},
  put(key, value) {
    this.values[key] = value;
    for (const resolve of this.waiting[key] || []) resolve(value);
    delete this.waiting[key];
  },
  get(key) {
    if (key in this.values) return Promise.resolve(this.values[key]);
    if (!/^r[0-9]+\/p[0-9]+$/.test(key)) return Promise.reject(new Error(`no such bundle file: ${key}`));
    return new Promise((resolve, reject) => {
      const first = !this.waiting[key];
      (this.waiting[key] = this.waiting[key] || []).push(resolve);
      if (!first) return;
      const script = document.createElement("script");
      script.src = `data/${key}.js`;
      script.onerror = () => reject(new Error(`cannot load data/${key}.js from the bundle`));
      document.head.append(script);
    });
  },
};
