"""The `hashapp` builder: a single-page app with hash routes (`/#/list?q=...&cat=...&sort=...&page=2`,
`/#/item/1003`). The server sends one shell for every page; a script renders each route after load from JSON the
shell embeds (the site's catalog, cached per site, and the session: user, cart, records, orders) and re-renders on
every in-app link, search, sort change or "Load more" without reloading. Navigation is a mega menu; listings are
cards with "Load more" (page N shows the first N pages); records are tabs; a select field is an ARIA combobox;
notices (cookie consent, the pop-up, "added to cart") are toasts. Forms post natively to the route's path on the
server (`Builder.form_url`), which answers with a redirect back into the app or, on a validation error, with the
shell carrying the view to show (the form with its values and errors)."""

from __future__ import annotations

import json
from functools import lru_cache
from html import escape

from starlette.responses import HTMLResponse, Response
from webenv.sites.builders.base import (
    CHECKOUT_FIELDS,
    PAGE_SIZE,
    SORTS,
    Builder,
    Ctx,
    Scheme,
    click,
    css_str,
    fill,
    search,
    select,
)
from webenv.sites.catalog import THEMES, Site
from webenv.sites.families.base import Item
from webenv.v1 import common_pb2 as pb

SORT_NAMES = {"relevance": "Recommended", "value_asc": "{v}: lowest", "value_desc": "{v}: highest",
              "date_desc": "Most recent", "rating_desc": "Best rated"}
APP = r"""<script>(function(){
var B=JSON.parse(document.getElementById("ha-boot").textContent),S=JSON.parse(document.getElementById("ha-session").textContent);
var F=B.fam,byId={},byNum={};B.items.forEach(function(x){byId[x.id]=x;byNum[x.n]=x;});
var PRIVATE=["list","item","me","cart","checkout","orders","done"],view=S.view;
function h(tag,props,kids){var e=document.createElement(tag);for(var k in(props||{})){var v=props[k];if(v===null||v===false)continue;
 if(k==="text")e.textContent=v;else if(k.slice(0,2)==="on")e.addEventListener(k.slice(2),v);else e.setAttribute(k,v===true?"":v);}
 (kids||[]).forEach(function(c){if(c!==null&&c!==undefined)e.appendChild(typeof c==="string"?document.createTextNode(c):c);});return e;}
function ck(n){document.cookie=n+"=1; path=/; max-age=31536000";}
function route(){var r=location.hash.replace(/^#/,"")||"/",i=r.indexOf("?"),p=i<0?r:r.slice(0,i),q=new URLSearchParams(i<0?"":r.slice(i+1));
 var parts=p.split("/").filter(Boolean);return {path:p,parts:parts,q:q,here:"/#"+r};}
function listUrl(q,cat,sort,page){var u=new URLSearchParams();if(q)u.append(B.names.q,q);if(cat)u.append(B.names.cat,cat);
 if(sort&&sort!=="relevance")u.append(B.names.sort,B.sortv[sort]||sort);if(page>1)u.append(B.names.page,String(page));
 var s=u.toString();return "/#/list"+(s?"?"+s:"");}
function go(url){history.pushState(null,"",url);render();window.scrollTo(0,0);}
function toast(text,btnId,btnText,cookie){var t=h("div",{"class":"ha-toast",role:"status"},[h("span",{text:text})]);
 if(btnId){t.appendChild(h("button",{type:"button",id:btnId,text:btnText,onclick:function(){if(cookie)ck(cookie);t.remove();}}));}
 else{setTimeout(function(){t.remove();},5000);}document.getElementById("ha-toasts").appendChild(t);}
function field(f,val,err){var id="ha-f-"+f.name,kids;
 if(f.kind==="select"){var hid=h("input",{type:"hidden",name:f.name,value:val||""}),lb=h("ul",{id:"ha-lb-"+f.name,role:"listbox",hidden:true,"aria-label":f.label});
  var box=h("input",{id:id,role:"combobox","aria-expanded":"false","aria-controls":"ha-lb-"+f.name,"aria-autocomplete":"none",readonly:true,value:val||"",placeholder:"Choose…",onclick:function(){var open=lb.hidden;lb.hidden=!open;box.setAttribute("aria-expanded",open?"true":"false");}});
  f.options.forEach(function(o,i){lb.appendChild(h("li",{role:"option",id:"ha-opt-"+f.name+"-"+i,"aria-selected":o===val?"true":"false",text:o,onclick:function(){
   hid.value=o;box.value=o;lb.hidden=true;box.setAttribute("aria-expanded","false");lb.querySelectorAll("[role=option]").forEach(function(x){x.setAttribute("aria-selected",x===this?"true":"false");},this);}}));});
  var act=-1;function mark(i){var os=lb.querySelectorAll("[role=option]");act=i;os.forEach(function(x,j){x.classList.toggle("ha-active",j===i);});box.setAttribute("aria-activedescendant",os[i].id);}
  box.addEventListener("keydown",function(e){var n=f.options.length,down=e.key==="ArrowDown";
   if(down||e.key==="ArrowUp"){e.preventDefault();lb.hidden=false;box.setAttribute("aria-expanded","true");mark(act<0?(down?0:n-1):(act+(down?1:n-1))%n);}
   else if(e.key==="Enter"&&!lb.hidden&&act>=0){e.preventDefault();lb.querySelectorAll("[role=option]")[act].click();}
   else if(e.key==="Escape"){lb.hidden=true;box.setAttribute("aria-expanded","false");}});
  kids=[h("label",{"for":id,text:f.label}),box,hid,lb];}
 else if(f.kind==="checkbox"){kids=[h("label",{},[h("input",{type:"checkbox",id:id,name:f.name,checked:val==="on"}),h("span",{text:" "+f.label})])];}
 else if(f.kind==="textarea"){var ta=h("textarea",{id:id,name:f.name,rows:"4",required:f.required});ta.value=val||"";kids=[h("label",{"for":id,text:f.label}),ta];}
 else{kids=[h("label",{"for":id,text:f.label}),h("input",{id:id,name:f.name,type:f.kind==="email"?"email":f.kind==="number"?"number":"text",min:f.min,max:f.max,value:val||"",required:f.required})];}
 if(err)kids.push(h("p",{"class":"ha-err",text:err}));return h("div",{"class":"ha-field"},kids);}
function form(action,fields,values,errors,button,extra){var fm=h("form",{method:"post",action:action},(extra||[]).concat(
 fields.map(function(f){return field(f,(values||{})[f.name],(errors||{})[f.name]);})));
 fm.appendChild(h("button",{type:"submit",id:"ha-submit","class":"ha-cta",text:button}));return fm;}
function card(x){return h("article",{"class":"ha-card"},[h("a",{href:"/#/item/"+x.n,text:x.t}),h("p",{text:x.v+" · "+x.a+" · "+x.d})]);}
function loginView(next,error){return [h("h1",{text:B.words.login}),error?h("p",{"class":"ha-err",role:"alert",text:error}):null,
 h("form",{method:"post",action:"/login","class":"ha-panel"},[h("input",{type:"hidden",name:"next",value:next}),
  h("label",{"for":"ha-user",text:"Username"}),h("input",{id:"ha-user",name:"username",autocomplete:"username"}),
  h("label",{"for":"ha-pass",text:"Password"}),h("input",{id:"ha-pass",name:"password",type:"password"}),
  h("button",{id:"ha-login-go",type:"submit","class":"ha-cta",text:B.words.login})])];}
function facts(x){return h("table",{"class":"ha-facts"},x.map(function(r){return h("tr",{},[h("th",{text:r[0]}),h("td",{text:r[1]})]);}));}
function itemView(x,values,errors){var tabs=[["Overview",[facts([[F.value_label,x.v],[F.author_label,x.a],["Category",B.cats[x.c]||x.c],[F.date_label+" date",x.d],["Rating",x.r+" / 5"]]),h("p",{text:x.b})]],
 ["Details",[facts(x.at)]],["Reviews ("+x.rv.length+")",x.rv.length?x.rv.map(function(r){return h("blockquote",{text:"“"+r[2]+"” — "+r[0]+", "+r[1]+"/5"});}):[h("p",{text:"No reviews yet."})]]];
 var bar=h("div",{role:"tablist","class":"ha-tabs"}),panels=[];
 tabs.forEach(function(t,i){var p=h("section",{role:"tabpanel",id:"ha-panel-"+i,hidden:i>0},t[1]);panels.push(p);
  bar.appendChild(h("button",{type:"button",role:"tab",id:"ha-tab-"+i,"aria-controls":"ha-panel-"+i,"aria-selected":i===0?"true":"false",text:t[0],onclick:function(){
   bar.querySelectorAll("[role=tab]").forEach(function(b){b.setAttribute("aria-selected","false");});this.setAttribute("aria-selected","true");
   panels.forEach(function(q){q.hidden=q!==p;});}}));});
 var out=[h("p",{"class":"ha-crumbs"},[h("a",{href:listUrl("",x.c,"relevance",1),text:B.cats[x.c]||x.c})]),h("h1",{text:x.t}),bar].concat(panels);
 if(F.shop){out.push(h("form",{method:"post",action:"/cart/add","class":"ha-panel"},[errors&&errors.qty?h("p",{"class":"ha-err",text:errors.qty}):null,
  h("input",{type:"hidden",name:"sku",value:x.id}),h("label",{"for":"ha-qty",text:"Quantity"}),h("input",{id:"ha-qty",name:"qty",type:"number",min:"1",max:"10",value:"1"}),
  h("button",{id:"ha-add",type:"submit","class":"ha-cta",text:B.words.add_cart})]));}
 else{out.push(h("section",{"class":"ha-panel"},[h("h2",{text:F.action.button}),errors&&Object.keys(errors).length?h("p",{"class":"ha-err",role:"alert",text:"Please fix the fields below."}):null,
  form("/item/"+x.n+"/apply",F.action.fields,values,errors,B.words.send)]));}
 return out;}
function listView(r){var q=r.q.get(B.names.q)||"",cat=r.q.get(B.names.cat)||"",sv=r.q.get(B.names.sort)||"relevance",page=Math.max(1,parseInt(r.q.get(B.names.page)||"1",10)||1);
 var sort=B.sortback[sv]||"relevance";if(!B.cats[cat])cat="";var ql=q.trim().toLowerCase(),words=ql.split(/\s+/).filter(Boolean);
 var ids=sort==="relevance"?(ql?B.order.byid:B.order.relevance):B.order[sort];
 var found=ids.map(function(i){return byId[i];}).filter(function(x){return(!cat||x.c===cat)&&words.every(function(w){return x.h.indexOf(w)>=0;});});
 if(sort==="relevance"&&ql){found=found.filter(function(x){return x.lt===ql;}).concat(found.filter(function(x){return x.lt!==ql;}));}
 var shown=found.slice(0,page*B.size),sel=h("select",{id:"ha-sort","aria-label":"Sort by",onchange:function(){go(listUrl(q,cat,B.sortback[this.value],1));}},
  B.sorts.map(function(s){return h("option",{value:B.sortv[s[0]]||s[0],selected:s[0]===sort,text:s[1]});}));
 var out=[h("h1",{text:q?"Results for “"+q+"”":cat?B.cats[cat]:"All "+F.plural}),h("div",{"class":"ha-toolbar"},[h("span",{text:found.length+" "+F.plural}),h("label",{},["Sort by ",sel])]),
  h("div",{"class":"ha-results"},shown.length?shown.map(card):[h("p",{text:"Nothing matches. Try another search."})])];
 if(shown.length<found.length){out.push(h("button",{type:"button",id:"ha-more","class":"ha-cta",text:B.words.more+" ("+(found.length-shown.length)+" left)",onclick:function(){go(listUrl(q,cat,sort,page+1));}}));}
 return out;}
function cartView(added){var lines=S.cart.map(function(l){return[byId[l[0]],l[1]];}).filter(function(l){return l[0];}),total=0;
 if(added&&byId[added])toast("Added “"+byId[added].t+"” to your cart");
 if(!lines.length)return [h("h1",{text:"Your cart"}),h("p",{text:"Your cart is empty."})];
 return [h("h1",{text:"Your cart"}),h("ul",{"class":"ha-lines"},lines.map(function(l){total+=l[0].vn*l[1];return h("li",{},[l[0].t+" × "+l[1]+" — "+l[0].v+" ",
  h("form",{method:"post",action:"/cart/remove"},[h("input",{type:"hidden",name:"sku",value:l[0].id}),h("button",{type:"submit","aria-label":"Remove "+l[0].t,text:"Remove"})])]);})),
  h("p",{text:"Total: $"+total.toLocaleString("en-US",{minimumFractionDigits:2,maximumFractionDigits:2})}),h("a",{id:"ha-checkout","class":"ha-cta",href:"/#/checkout",text:B.words.checkout})];}
function receipt(title,ref,rows){return [h("h1",{text:title}),h("p",{text:"Reference: "+ref}),h("ul",{},rows.map(function(r){return h("li",{text:r[0]+": "+r[1]});})),h("a",{href:"/#/",text:"Back to home"})];}
function body(r,v){var k=r.parts[0]||"home";
 if(v){if(v.kind==="item")return itemView(byNum[v.n],v.values,v.errors);if(v.kind==="login")return loginView(v.next,v.error);
  if(v.kind==="checkout")return [h("h1",{text:"Checkout"}),v.errors.cart?h("p",{"class":"ha-err",text:v.errors.cart}):null,form("/checkout",B.checkout,v.values,v.errors,B.words.place)];
  var d=h("div");d.innerHTML=v.html;return [d];}
 if(F.login&&!S.user&&PRIVATE.indexOf(k)>=0)return loginView(r.here,"");
 if(k==="home"){return F.login&&!S.user?[h("h1",{text:B.name}),h("p",{text:"Sign in to see your "+F.plural+"."})]:
  [h("section",{"class":"ha-hero"},[h("h1",{text:B.name}),h("p",{text:B.tagline})]),h("h2",{text:"Top rated"}),h("div",{"class":"ha-results"},B.order.rating_desc.slice(0,4).map(function(i){return card(byId[i]);}))];}
 if(k==="list")return listView(r);
 if(k==="item"&&byNum[r.parts[1]])return itemView(byNum[r.parts[1]],{},{});
 if(k==="login")return loginView(r.q.get("next")||"/#/","");
 if(k==="cart"&&F.shop)return cartView(r.q.get("added"));
 if(k==="checkout"&&F.shop)return S.cart.length?[h("h1",{text:"Checkout"}),form("/checkout",B.checkout,{},{},B.words.place)]:cartView("");
 if(k==="orders"){var o=S.orders.filter(function(x){return x.order_id===r.parts[1];})[0];
  if(o)return receipt("Thank you for your order",o.order_id,o.items.map(function(l){return[l.title,l.qty+" x $"+l.price.toFixed(2)];}).concat([["Ship to",[o.shipping.name,o.shipping.street,o.shipping.city,o.shipping.zip].join(", ")]]));}
 if(k==="done"&&F.action){var d2=S.records.filter(function(x){return x.id===r.parts[1];})[0];
  if(d2)return receipt(F.action.done_text,d2.id,Object.keys(d2).filter(function(x){return x!=="id";}).map(function(x){return[x,String(d2[x])];}));}
 if(k==="me")return S.user?[h("h1",{text:"Your account"}),h("p",{text:"Signed in as "+S.user}),h("h2",{text:"History"}),h("ul",{},(F.action?S.records:S.orders).map(function(x){return h("li",{text:JSON.stringify(x)});}))]:loginView(r.here,"");
 if(k==="help")return [h("h1",{text:"Help"}),h("h2",{text:"How do I find a "+F.noun+"?"}),h("p",{text:"Search at the top, or open Browse and pick a category."}),h("h2",{text:"How do you use cookies?"}),h("p",{text:"Only to remember your session."})];
 if(k==="about")return [h("h1",{text:"About "+B.name}),h("p",{text:B.tagline}),r.q.get("ref")?h("p",{text:"Shared item: "+r.q.get("ref")}):null];
 return [h("h1",{text:"Page not found"}),h("p",{text:"Nothing lives at this address."})];}
function header(r){var panel=h("div",{id:"ha-mega-panel","class":"ha-mega-panel",hidden:true},[
  h("section",{},[h("h3",{text:"Categories"}),h("a",{href:listUrl("","","relevance",1),id:"ha-all",text:"All "+F.plural})].concat(B.catlist.map(function(c){return h("a",{href:listUrl("",c[0],"relevance",1),text:c[1]});}))),
  h("section",{},[h("h3",{text:"Discover"}),h("a",{href:listUrl("","","rating_desc",1),text:"Best rated"}),h("a",{href:listUrl("","","date_desc",1),text:"Most recent"})]),
  h("section",{},[h("h3",{text:"Support"}),h("a",{href:"/#/help",text:"Help"}),h("a",{href:"/#/about",text:"About us"})])]);
 var btn=h("button",{type:"button","class":"ha-mega-btn","aria-expanded":"false","aria-controls":"ha-mega-panel",text:B.words.browse,onclick:function(){var open=panel.hidden;panel.hidden=!open;btn.setAttribute("aria-expanded",open?"true":"false");}});
 var q=h("input",{id:"ha-q",type:"search",name:"q","aria-label":B.words.search,placeholder:B.placeholder,value:r.q.get(B.names.q)||""});
 var acct=S.user?h("span",{},[h("a",{href:"/#/me",text:S.user}),h("form",{method:"post",action:"/logout","class":"ha-inline"},[h("button",{type:"submit",text:"Sign out"})])]):
  h("a",{id:"ha-signin",href:"/#/login?next="+encodeURIComponent(r.parts[0]==="login"?(r.q.get("next")||"/#/"):r.here),text:B.words.login});
 return h("header",{"class":"ha-top"},[h("a",{"class":"ha-brand",href:"/#/",text:B.name}),h("nav",{"class":"ha-mega","aria-label":"Main"},[btn,panel]),
  h("form",{"class":"ha-search",role:"search",onsubmit:function(e){e.preventDefault();go(listUrl(q.value,"","relevance",1));}},[q,h("button",{id:"ha-go",type:"submit",text:B.words.search})]),
  acct,F.shop?h("a",{href:"/#/cart",text:"Cart ("+S.cart.reduce(function(a,l){return a+l[1];},0)+")"}):null]);}
function render(){var r=route(),root=document.getElementById("ha-root");root.textContent="";root.appendChild(header(r));
 var m=h("main",{id:"ha-view"},body(r,view));view=null;root.appendChild(m);root.appendChild(h("footer",{"class":"ha-foot",text:B.tagline+" · "+B.name}));
 var t=m.querySelector("h1");document.title=(t?t.textContent+" · ":"")+B.name;}
document.addEventListener("click",function(e){var a=e.target.closest&&e.target.closest("a[href^='/#/']");if(a&&!e.defaultPrevented){e.preventDefault();go(a.getAttribute("href"));}});
window.addEventListener("hashchange",function(){render();});window.addEventListener("popstate",function(){render();});
render();
if(S.banner)toast(B.words.cookie,"ha-cookie-ok",B.words.accept,"cookie_consent");
if(S.popup)toast(B.words.popup,"ha-promo-close",B.words.close,"popup_dismissed");
})();</script>"""


class HashApp(Builder):
    name = "hashapp"
    summary = "a single-page app: hash routes, pages drawn by script from embedded JSON, mega menu, combobox, toasts"
    scheme = Scheme(
        routes={
            "home": "/", "listing": "/list", "record": "/item/{num}", "act": "/item/{num}/apply", "login": "/login",
            "logout": "/logout", "help": "/help", "about": "/about", "account": "/me", "cart": "/cart",
            "cart_add": "/cart/add", "cart_remove": "/cart/remove", "checkout": "/checkout", "order": "/orders/{id}",
            "done": "/done/{id}",
        },
        q="q", category="cat", sort="sort", page="page", hash=True,
        sort_values={"relevance": "recommended", "value_asc": "value-low", "value_desc": "value-high",
                     "date_desc": "recent", "rating_desc": "top-rated"},
    )
    words = {
        "search": ("Search", "Find"),
        "send": ("Submit", "Send", "Confirm"),
        "add_cart": ("Add to cart", "Add"),
        "checkout": ("Checkout", "Go to checkout"),
        "place": ("Place order", "Pay now"),
        "accept": ("Accept", "OK"),
        "close": ("Dismiss", "Not now"),
        "login": ("Sign in", "Log in"),
        "browse": ("Browse", "Explore", "Menu"),
        "more": ("Load more", "Show more"),
    }

    # --- the server side: one shell, forms posting to the routes' paths ---------------------------------------------
    def route(self, ctx: Ctx) -> Response:
        req = ctx.request
        path = req.scope["path"]
        if req.method != "POST" and path.rstrip("/") not in ("", "/index.html"):  # a deep link into the app
            return self.redirect("/#" + path + ("?" + req.url.query if req.url.query else ""))
        return super().route(ctx)

    def start_text(self, site: Site) -> str:
        """The shell, and what its script draws at `/` (`body`, `header`): the name, tagline and categories (the mega
        menu), then the four best rated items' cards (`card`: the title; value · author · date), or a portal's prompt
        to sign in."""
        drawn = [site.name, str(site.look["tagline"]), *site.category_labels.values()]
        if site.family.login_required:
            drawn.append(f"Sign in to see your {site.family.plural}.")
        else:
            drawn += [f"{it.title} {it.value_text} · {it.author} · {site.fmt_date(it.date)}"
                      for it in search(site, "", "", "rating_desc")[:4]]
        return f"{super().start_text(site)} {' '.join(drawn)}"

    def shell(self, ctx: Ctx) -> Response:
        return self.page(ctx, ctx.site.name, "null")

    def page(self, ctx: Ctx, title: str, body: str, status: int = 200) -> HTMLResponse:
        """The shell; `body` is the view a server answer shows instead of the route's (JSON from render_*)."""
        site = ctx.site
        view = body if body.startswith(("{", "null")) else json.dumps({"kind": "html", "html": body})
        action = site.family.action
        session = json.dumps({
            "user": ctx.user, "cart": [[x["sku"], x["qty"]] for x in ctx.st.get("cart", {}).get("items", [])],
            "records": ctx.st.get(action.key, []) if action else [], "orders": ctx.st.get("orders", []),
            "banner": ctx.show_banner, "popup": ctx.show_popup}, ensure_ascii=False)
        session = session[:-1] + f', "view": {view}}}'
        boot = _boot(self, site, not site.family.login_required or ctx.user is not None)
        html = (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width='
                f'device-width, initial-scale=1"><title>{escape(title)} · {escape(site.name)}</title><link rel="icon" '
                f'href="data:,"><style>{_style(site)}</style></head><body><div id="ha-root"></div>'
                f'<div id="ha-toasts" aria-live="polite"></div><script type="application/json" id="ha-boot">{boot}'
                f'</script><script type="application/json" id="ha-session">{_safe(session)}</script>{APP}</body></html>')
        return HTMLResponse(html, status_code=status)

    def render_home(self, ctx: Ctx) -> str:
        return "null"

    def render_listing(self, ctx: Ctx, items: list[Item], *, q: str, category: str, sort: str, page: int, total: int,
                       found: list[Item]) -> str:
        return "null"  # never served: a GET of /list is a deep link, redirected into the app

    def render_record(self, ctx: Ctx, item: Item, values: dict[str, str], errors: dict[str, str]) -> str:
        n = item.id.removeprefix(ctx.site.family.id_prefix)
        return json.dumps({"kind": "item", "n": n, "values": values, "errors": errors}, ensure_ascii=False)

    def render_login(self, ctx: Ctx, nxt: str, error: str) -> str:
        return json.dumps({"kind": "login", "next": nxt, "error": error}, ensure_ascii=False)

    def render_cart(self, ctx: Ctx, added: Item | None) -> str:
        return "null"

    def render_checkout(self, ctx: Ctx, values: dict[str, str], errors: dict[str, str]) -> str:
        return json.dumps({"kind": "checkout", "values": values, "errors": errors}, ensure_ascii=False)

    # --- oracle -----------------------------------------------------------------------------------------------
    details_tab = "#ha-tab-1"  # the Details tab (the record view's second)

    def dismiss(self, site: Site) -> list[pb.Action]:
        return ([click("#ha-promo-close")] if site.look["popup"] else []) + \
            ([click("#ha-cookie-ok")] if site.look["cookie_banner"] else [])

    def log_in(self, site: Site, username: str, password: str) -> list[pb.Action]:
        return [click("#ha-signin"), fill("#ha-user", username), fill("#ha-pass", password), click("#ha-login-go")]

    def open_record(self, site: Site, item: Item) -> list[pb.Action]:
        return [fill("#ha-q", item.title), click("#ha-go")] + self.open_listed(site, item)

    def open_listed(self, site: Site, item: Item) -> list[pb.Action]:
        return [click(f".ha-results a[href={css_str(self.url_record(site, item))}]")]

    def browse(self, site: Site, *, category: str = "", sort: str = "relevance", page: int = 1) -> list[pb.Action]:
        acts = [click(".ha-mega-btn"), click(f"#ha-mega-panel a[href={css_str(self.url_listing(site, '', category))}]")]
        if sort != "relevance":
            acts.append(select("#ha-sort", self.scheme.sort_values[sort]))
        return acts + [click("#ha-more")] * (page - 1)

    def submit_record(self, site: Site, item: Item, values: dict[str, object]) -> list[pb.Action]:
        spec = site.family.action
        assert spec is not None
        acts: list[pb.Action] = []
        for f in spec.fields:
            v = values[f.name]
            if f.kind == "select":
                acts += [click(f"#ha-f-{f.name}"), click(f"#ha-opt-{f.name}-{f.options.index(str(v))}")]
            elif f.kind == "checkbox":
                if v:
                    acts.append(click(f"#ha-f-{f.name}"))
            else:
                acts.append(fill(f"#ha-f-{f.name}", str(v)))
        return acts + [click("#ha-submit")]

    def add_to_cart(self, site: Site, item: Item, qty: int) -> list[pb.Action]:
        return [fill("#ha-qty", str(qty)), click("#ha-add")]

    def check_out(self, site: Site, address: dict[str, str]) -> list[pb.Action]:
        return ([click("#ha-checkout")] + [fill(f"#ha-f-{k}", address[k]) for k in ("name", "street", "city", "zip")]
                + [click("#ha-submit")])


def _safe(js: str) -> str:
    """JSON inside a <script> element: no "</script>" or "<!--" can end or bend it."""
    return js.replace("<", "\\u003c")


@lru_cache(maxsize=8192)
def _boot(b: HashApp, site: Site, with_items: bool) -> str:
    """The site's side of the app (catalog, labels, orderings), cached per site; items only where they are public."""
    fam = site.family

    def spec(f: object) -> dict[str, object]:
        return {k: getattr(f, k) for k in ("name", "label", "kind", "options", "required", "min", "max")}

    items = site.items if with_items else []
    data = {
        "name": site.name, "tagline": str(site.look["tagline"]), "size": PAGE_SIZE,
        "placeholder": site.words["search_placeholder"],
        "names": {"q": b.scheme.q, "cat": b.scheme.category, "sort": b.scheme.sort, "page": b.scheme.page},
        "sortv": b.scheme.sort_values, "sortback": {v: k for k, v in b.scheme.sort_values.items()},
        "sorts": [[s, SORT_NAMES[s].format(v=fam.value_label)] for s in SORTS],
        "cats": site.category_labels, "catlist": list(site.category_labels.items()),
        "words": {k: b.word(site, k) for k in ("search", "send", "add_cart", "checkout", "place", "accept", "close",
                                              "login", "browse", "more", "cookie", "popup")},
        "fam": {"noun": fam.noun, "plural": fam.plural, "value_label": fam.value_label, "author_label": fam.author_label,
                "date_label": fam.date_label, "shop": fam.action is None, "login": fam.login_required,
                "action": {"button": str(site.look["action_button"]), "done_text": fam.action.done_text,
                           "fields": [spec(f) for f in fam.action.fields]} if fam.action else None},
        "checkout": [spec(f) for f in CHECKOUT_FIELDS],
        "items": [{"id": it.id, "n": it.id.removeprefix(fam.id_prefix), "t": it.title, "lt": it.title.lower(),
                   "v": it.value_text, "vn": it.value, "a": it.author, "d": site.fmt_date(it.date), "c": it.category,
                   "r": f"{it.rating:.1f}", "at": [list(a) for a in it.attrs], "b": it.body,
                   "rv": [[str(r["author"]), r["stars"], str(r["text"])] for r in it.reviews],
                   "h": f"{it.title} {it.author} {it.body}".lower()} for it in items],
        "order": {s: [it.id for it in search(site, "", "", s)] for s in SORTS} if items else
        {s: [] for s in SORTS},
    }
    data["order"]["byid"] = sorted(it.id for it in items)
    return _safe(json.dumps(data, ensure_ascii=False))


@lru_cache(maxsize=8192)
def _style(site: Site) -> str:
    accent, bg, fg, font = THEMES[(int(site.look["theme"]) + 4) % len(THEMES)]
    return (f"body{{margin:0;font-family:{font};background:{bg};color:{fg}}}.ha-top{{display:flex;gap:16px;align-items:"
            f"center;padding:10px 20px;background:#fff;box-shadow:0 2px 6px #0002;position:relative}}.ha-brand{{font-weight:"
            f"700;text-decoration:none;color:{accent}}}.ha-mega-panel{{position:absolute;left:0;right:0;top:100%;background:"
            f"#fff;display:grid;grid-template-columns:repeat(3,1fr);gap:20px;padding:20px;box-shadow:0 8px 16px #0003;"
            f"z-index:20}}.ha-mega-panel a{{display:block;padding:3px 0}}[hidden]{{display:none!important}}#ha-view{{max-width:"
            f"980px;margin:auto;padding:20px}}.ha-results{{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,"
            f"1fr));gap:14px}}.ha-card{{background:#fff;border-radius:10px;padding:12px;box-shadow:0 1px 3px #0003}}"
            f".ha-cta{{background:{accent};color:#fff;border:0;border-radius:6px;padding:8px 16px;margin:10px 0;"
            f"display:inline-block;text-decoration:none}}.ha-err{{color:#c62828}}.ha-field{{margin:10px 0;position:relative}}"
            f".ha-field label{{display:block}}[role=listbox]{{list-style:none;margin:0;padding:4px;background:#fff;"
            f"border:1px solid #999;position:absolute;z-index:10}}[role=option]{{padding:4px 10px;cursor:pointer}}"
            f"[role=option][aria-selected=true]{{background:{accent};color:#fff}}.ha-active{{outline:2px solid {accent}}}[role=tab][aria-selected=true]{{"
            f"border-bottom:3px solid {accent}}}#ha-toasts{{position:fixed;right:16px;bottom:16px;display:flex;"
            f"flex-direction:column;gap:8px;z-index:50}}.ha-toast{{background:#222;color:#fff;padding:10px 14px;"
            f"border-radius:8px}}.ha-toast button{{margin-left:10px}}.ha-inline{{display:inline}}.ha-foot{{padding:20px;"
            f"text-align:center;font-size:90%}}.ha-facts th{{text-align:left;padding-right:16px}}")
